package plugin

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bermsec/berm/collector/query"
	"github.com/bermsec/berm/testenv/testutil"
)

// TestPluginJSON: the id and executable Grafana reads are the ones the backend and make build
// use.
func TestPluginJSON(t *testing.T) {
	b, err := os.ReadFile("dist/plugin.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		Backend    bool   `json:"backend"`
		Executable string `json:"executable"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.ID != ID || p.Type != "datasource" || !p.Backend || p.Executable != "gpx_berm-datasource" {
		t.Errorf("plugin.json: %+v", p)
	}
	mk, _ := os.ReadFile("../../Makefile")
	if !strings.Contains(string(mk), "gpx_berm-datasource_$$") {
		t.Errorf("make build does not name the executable %s_<os>_<arch>", p.Executable)
	}
}

// TestModuleJS: the hand-written frontend offers every query type the backend serves, and is
// valid JavaScript (checked by node when it is installed).
func TestModuleJS(t *testing.T) {
	b, err := os.ReadFile("dist/module.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)var QUERY_TYPES = \[(.*?)\];`).FindSubmatch(b)
	if m == nil {
		t.Fatal("module.js has no QUERY_TYPES")
	}
	var inJS []string
	for _, s := range regexp.MustCompile(`'(\w+)'`).FindAllSubmatch(m[1], -1) {
		inJS = append(inJS, string(s[1]))
	}
	var served []string
	for _, qt := range query.Types() {
		served = append(served, qt[0])
	}
	if !slices.Equal(inJS, served) {
		t.Errorf("module.js QUERY_TYPES %v, the backend serves %v", inJS, served)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Unavailable(t, "node is not installed: module.js's syntax is not checked here (testenv/install-deps.sh installs nodejs)")
	}
	if out, err := exec.Command(node, "--check", "dist/module.js").CombinedOutput(); err != nil {
		t.Errorf("node --check module.js: %v\n%s", err, out)
	}
}
