// Package layering checks that berm's packages depend on each other in one direction:
// cmd → sandboxer → agent → {event, policy, bpf}; collector and dashboards read the trail, with the event schema and the policy model
// as leaves both sides import. A component that reaches back (the agent into the sandboxer)
// makes every change on one side a change on the other; this test names the edge that does.
package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/bermsec/berm/"

// rules: a package under the first prefix must not import a package under any of the others.
var rules = []struct {
	pkg    string
	forbid []string
	why    string
}{
	{"agent", []string{"sandboxer", "collector", "rules", "cmd"}, "the agent is below the launcher: launchers inject what it needs"},
	{"agent/event", []string{"agent/", "bpf"}, "the event schema is a leaf"},
	{"agent/policy", []string{"agent$", "agent/journal", "agent/lsm", "agent/netguard", "agent/tracer", "agent/dnsguard", "bpf"}, "the policy model is a leaf (it may use the event schema)"},
	{"bpf", []string{"agent", "sandboxer", "collector", "rules", "cmd"}, "the kernel objects know nothing of their users"},
	{"sandboxer", []string{"cmd", "collector", "rules"}, "the launcher is below the commands"},
	{"sandboxer/callproto", []string{"agent$", "agent/tracer", "agent/journal", "sandboxer$", "sandboxer/approval", "sandboxer/sandboxinit"}, "the run protocol is a contract: the front links it, so it stays small"},
	{"sandboxer/probe", []string{"sandboxer$"}, "the kernel probe is below the launcher that reports it"},
	{"collector", []string{"sandboxer", "rules", "cmd"}, "the collector reads the agent's journal only"},
	{"collector/audit", []string{"agent$", "agent/tracer", "agent/netguard", "agent/lsm", "sandboxer", "rules", "cmd"}, "reading the trail back needs the journal and the schema, not the live agent"},
	{"dashboards", []string{"sandboxer", "cmd", "agent$", "agent/tracer"}, "the dashboards read what the collector stores"},
	{"rules", []string{"sandboxer", "collector", "cmd", "agent/tracer", "agent/netguard", "agent/lsm"}, "rules see events, nothing else"},
}

func TestDependenciesPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/bermsec/berm/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, r := range rules {
			if !under(rel, r.pkg) {
				continue
			}
			for _, imp := range p.Imports {
				dep, ok := strings.CutPrefix(imp, module)
				if !ok {
					continue
				}
				for _, f := range r.forbid {
					exact, isExact := strings.CutSuffix(f, "$")
					hit := under(dep, strings.TrimSuffix(f, "/"))
					if isExact {
						hit = dep == exact
					}
					if hit && !under(dep, r.pkg) {
						t.Errorf("%s imports %s: %s", rel, dep, r.why)
					}
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list saw %d packages: the check looked at nothing", n)
	}
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }
