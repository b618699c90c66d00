// Package promscrape reads one value from a Prometheus text endpoint, for the tests and the
// benchmark that watch bermd (its warm sandboxes) through /metrics.
package promscrape

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Value fetches http://addr/metrics and returns the sample of an unlabelled metric.
func Value(addr, name string) (float64, error) {
	lines, err := scrape(addr)
	if err != nil {
		return 0, err
	}
	for _, line := range lines {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s exports no %s", addr, name)
}

// Labelled fetches http://addr/metrics and returns the sample of name whose label has value
// (the first such sample).
func Labelled(addr, name, label, value string) (float64, error) {
	lines, err := scrape(addr)
	if err != nil {
		return 0, err
	}
	want := label + "=\"" + value + "\""
	for _, line := range lines {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, v, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(labels, ",") {
			if kv == want {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s exports no %s{%s}", addr, name, want)
}

// scrape fetches http://addr/metrics, one line per exposition line.
func scrape(addr string) ([]string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s/metrics: %w", addr, err)
	}
	return strings.Split(string(body), "\n"), nil
}
