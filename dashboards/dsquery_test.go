package dashboards

import (
	"fmt"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/grafana"
)

// gFrame is a data frame as Grafana's /api/ds/query answers it.
type gFrame struct {
	Schema struct {
		Name   string `json:"name"`
		Fields []struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
			Config struct {
				DisplayNameFromDS string `json:"displayNameFromDS"`
			} `json:"config"`
		} `json:"fields"`
	} `json:"schema"`
	Data struct {
		Values [][]any `json:"values"`
	} `json:"data"`
}

func (f gFrame) rows() int {
	if len(f.Data.Values) == 0 {
		return 0
	}
	return len(f.Data.Values[0])
}

// col is a field's values as text ("" for null).
func (f gFrame) col(t *testing.T, name string) []string {
	t.Helper()
	for i, fl := range f.Schema.Fields {
		if fl.Name == name {
			var out []string
			for _, v := range f.Data.Values[i] {
				if v == nil {
					out = append(out, "")
				} else {
					out = append(out, fmt.Sprint(v))
				}
			}
			return out
		}
	}
	t.Fatalf("frame %s has no field %s", f.Schema.Name, name)
	return nil
}

// row is row i as name -> text.
func (f gFrame) row(i int) map[string]string {
	m := map[string]string{}
	for j, fl := range f.Schema.Fields {
		m[fl.Name] = fmt.Sprint(f.Data.Values[j][i])
	}
	return m
}

// dsQuery sends one query through Grafana's /api/ds/query, as a panel does.
func dsQuery(g *grafana.Server, q map[string]any, from, to time.Time, intervalMs int) ([]gFrame, error) {
	q["refId"] = "A"
	if _, ok := q["intervalMs"]; !ok {
		q["intervalMs"] = intervalMs
	}
	q["maxDataPoints"] = 1000
	body := map[string]any{"queries": []any{q}, "from": fmt.Sprint(from.UnixMilli()), "to": fmt.Sprint(to.UnixMilli())}
	var resp struct {
		Results map[string]struct {
			Error  string   `json:"error"`
			Frames []gFrame `json:"frames"`
		} `json:"results"`
	}
	if err := g.Do("POST", "/api/ds/query", body, &resp); err != nil {
		return nil, err
	}
	r := resp.Results["A"]
	if r.Error != "" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	return r.Frames, nil
}
