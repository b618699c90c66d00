package main

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// launchPhases is bermd's berm_launch_phase_seconds at one time: each phase's sum and count
// by the kind of sandbox the launch ran in (warm, cold).
type launchPhases map[[2]string]struct{ sum, count float64 }

// scrapeLaunchPhases reads berm_launch_phase_seconds from bermd's metrics.
func scrapeLaunchPhases(d *daemon) launchPhases {
	resp, err := http.Get("http://" + d.Metrics + "/metrics")
	benchkit.Must(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	benchkit.Must(err)
	out := launchPhases{}
	for _, line := range strings.Split(string(body), "\n") {
		var field string
		switch {
		case strings.HasPrefix(line, "berm_launch_phase_seconds_sum{"):
			field = "sum"
		case strings.HasPrefix(line, "berm_launch_phase_seconds_count{"):
			field = "count"
		default:
			continue
		}
		labels, val, ok := strings.Cut(line[strings.Index(line, "{")+1:], "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		benchkit.Must(err)
		var phase, kind string
		for _, kv := range strings.Split(labels, "\",") {
			k, v, _ := strings.Cut(kv, "=\"")
			v = strings.TrimSuffix(v, "\"")
			switch k {
			case "phase":
				phase = v
			case "sandbox":
				kind = v
			}
		}
		e := out[[2]string{phase, kind}]
		if field == "sum" {
			e.sum = v
		} else {
			e.count = v
		}
		out[[2]string{phase, kind}] = e
	}
	return out
}

// minus is what was observed between before and p.
func (p launchPhases) minus(before launchPhases) launchPhases {
	out := launchPhases{}
	for k, v := range p {
		b := before[k]
		if v.count-b.count > 0 {
			out[k] = struct{ sum, count float64 }{v.sum - b.sum, v.count - b.count}
		}
	}
	return out
}

// launchPhaseOrder is the order of a launch's phases (cmd/bermd's daemon, sandboxer.Run, the
// agent's Begin and End): a warm launch skips the cold steps, a cold one the warm ones.
var launchPhaseOrder = []string{
	"request read", "flags parsed", "access check", "workspace open", "policy compile", "call id and disk quota",
	"pool lock wait", "pool claim", "pool refill scheduled", "cgroup limits",
	"reap stale cgroups", "cgroup create", "cgroup lease and ids", "pipes and cgroup fd", "clone init", "hold mount namespace",
	"workspace idmap", "credentials", "configure init",
	"registration: slot and scrub", "registration: journal call start", "registration: bpf maps and layers",
	"release init", "init set-up, tool and reap", "cleanup after tool",
	"end: unregister", "end: drain barrier", "end: record", "end: journal call end", "end: after journal", "reply",
}

// printLaunchPhases prints the mean time of each phase of the warm and the cold launches of
// each mode (name, what bermd observed during it).
func printLaunchPhases(names []string, obs []launchPhases) {
	if len(names) == 0 {
		return
	}
	known := map[string]bool{}
	for _, p := range launchPhaseOrder {
		known[p] = true
	}
	order := append([]string(nil), launchPhaseOrder...)
	var extra []string
	for _, o := range obs {
		for k := range o {
			if !known[k[0]] {
				known[k[0]] = true
				extra = append(extra, k[0])
			}
		}
	}
	sort.Strings(extra)
	order = append(order, extra...)
	fmt.Println("### Where a launch's time goes under load (bermd's berm_launch_phase_seconds: mean ms per launch, warm / cold)")
	fmt.Println()
	fmt.Print("| phase |")
	for _, n := range names {
		fmt.Printf(" %s |", n)
	}
	fmt.Println()
	fmt.Print("|---|")
	for range names {
		fmt.Print("---|")
	}
	fmt.Println()
	mean := func(o launchPhases, phase, kind string) string {
		e, ok := o[[2]string{phase, kind}]
		if !ok || e.count == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", e.sum/e.count*1000)
	}
	for _, ph := range order {
		fmt.Printf("| %s |", ph)
		for _, o := range obs {
			fmt.Printf(" %s / %s |", mean(o, ph, "warm"), mean(o, ph, "cold"))
		}
		fmt.Println()
	}
	// the whole launch in bermd, and the launches counted
	fmt.Print("| **sum of the means** (launches: warm / cold) |")
	for _, o := range obs {
		var sum [2]float64
		var n [2]float64
		for k, e := range o {
			i := 0
			if k[1] == "cold" {
				i = 1
			}
			sum[i] += e.sum / e.count * 1000
			if k[0] == "reply" {
				n[i] = e.count
			}
		}
		fmt.Printf(" %.2f / %.2f (%.0f / %.0f) |", sum[0], sum[1], n[0], n[1])
	}
	fmt.Println()
	fmt.Println()
}
