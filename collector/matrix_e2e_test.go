package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer/probe"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/testutil"
)

// matrixCalls are real calls through berm run, one tool per thing the matrix shows. The
// golden matrix holds their surfaces.
var matrixCalls = []struct {
	tool, tenant string
	args         []string
}{
	{"benign", "acme", []string{"--", "/bin/true"}},
	{"benign", "acme", []string{"--", "/bin/sh", "-c", "echo hello"}},
	// A Landlock denial: policy violated.
	{"denier", "acme", []string{"--", "/bin/sh", "-c", "echo x > /usr/berm-matrix-denied"}},
	// An alert with no denial (irreversible-git-force-push): approval, absent and violated.
	{"alerter", "acme", []string{"--", "/bin/sh", "-c", "git push --force origin main 2>/dev/null || true"}},
	// A cap hit (and the resource-output-flood alert on it): resource violated.
	{"capped", "acme", []string{"--output-limit", "1Ki", "--", "/bin/sh", "-c", "yes"}},
	// Audit mode: the policy surface is audit; its would-be denial is a violation.
	{"audited", "acme", []string{"--policy", "AUDIT", "--", "/bin/true"}},
	{"audited", "acme", []string{"--policy", "AUDIT", "--", "/bin/sh", "-c", "echo x > /usr/berm-matrix-audited"}},
	// Another tenant's call: --tenant acme leaves it out.
	{"benign", "globex", []string{"--", "/bin/sh", "-c", "echo x > /usr/berm-matrix-globex"}},
}

const auditPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata:
  name: audited
spec:
  mode: audit
`

// TestMatrixGolden runs real calls (benign, a denial, an alert, a cap hit, audit mode),
// ships them to a real ClickHouse and prints berm matrix from the journal and from
// ClickHouse: both must be the golden matrix, as table and as JSON. Rows the table holds twice
// until ClickHouse merges must not count twice.
func TestMatrixGolden(t *testing.T) {
	testutil.RequireRoot(t, "berm run creates cgroups and namespaces and loads eBPF")
	s := server(t)
	dsn := freshDB(t, s)
	bin := bermbin.Path(t, "berm")
	state := t.TempDir()
	pol := filepath.Join(t.TempDir(), "audited.yaml")
	if err := os.WriteFile(pol, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range matrixCalls {
		args := []string{"run", "--state-dir", state, "--tool", c.tool, "--tenant", c.tenant}
		for _, a := range c.args {
			if a == "AUDIT" {
				a = pol
			}
			args = append(args, a)
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && (!errors.As(err, &exit) || exit.ExitCode() >= 125 && exit.ExitCode() != event.StatusOutputLimit) {
			t.Fatalf("berm %v: %v\n%s", args, err, out)
		}
	}
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}

	// One golden per kind of kernel (BPF LSM allowed or refused): where Landlock handles every
	// right BPF LSM would enforce, both kinds give the same states (policy.SurfaceStates).
	golden := "testdata/matrix-lsm-refused.golden"
	if probe.Run(probe.Cgroups{Err: errors.New("not probed here")}).Has("bpf_lsm") {
		golden = "testdata/matrix-lsm.golden"
	}
	matrix := func(asJSON bool, source ...string) string {
		t.Helper()
		args := append([]string{"matrix", "--state-dir", state, "--tenant", "acme", "--since", "1h"}, source...)
		if asJSON {
			args = append(args, "--json")
		}
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("berm %v: %v\n%s", args, err, stderr.Bytes())
		}
		return string(out)
	}
	fromJournal, fromCH := matrix(false), matrix(false, "--source", dsn)
	if *update {
		if err := os.WriteFile(golden, []byte(fromJournal), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestMatrixGolden -update writes it)", err)
	}
	if fromJournal != string(want) {
		t.Errorf("matrix from the journal:\n%s\nwant (%s):\n%s", fromJournal, golden, want)
	}
	if fromCH != string(want) {
		t.Errorf("matrix from clickhouse:\n%s\nwant (%s):\n%s", fromCH, golden, want)
	}
	jsonJournal, jsonCH := matrix(true), matrix(true, "--source", dsn)
	if jsonJournal != jsonCH {
		t.Errorf("JSON matrices differ:\njournal:\n%s\nclickhouse:\n%s", jsonJournal, jsonCH)
	}

	// Until ClickHouse merges, a row delivered twice is there twice: the matrix counts the
	// call once.
	conn := connect(t, dsn)
	if err := conn.Exec(context.Background(), "INSERT INTO "+c.db+".calls SELECT * FROM "+c.db+".calls"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+c.db+".calls"); n != 2*uint64(len(matrixCalls)) {
		t.Fatalf("calls rows after doubling: %d, want %d", n, 2*len(matrixCalls))
	}
	if again := matrix(false, "--source", dsn); again != string(want) {
		t.Errorf("matrix from clickhouse with every row twice:\n%s\nwant:\n%s", again, want)
	}
}

// A tool that floods its call past the event budget hopes its refusals vanish into counts
// per object: the record's policy surface must still hold every one of them as a violation,
// and so must the matrix, from the journal and from ClickHouse.
func TestMatrixFloodPastBudget(t *testing.T) {
	testutil.RequireRoot(t, "berm run creates cgroups and namespaces and loads eBPF")
	s := server(t)
	dsn := freshDB(t, s)
	bin := bermbin.Path(t, "berm")
	state := t.TempDir()
	pol := filepath.Join(t.TempDir(), "tight.yaml")
	if err := os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata:\n  name: tight\nspec:\n  observability:\n    eventBudget: 50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const tries = 300
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo x > /usr/berm-flood-$i 2>/dev/null; i=$((i+1)); done; true", tries)
	if out, err := exec.Command(bin, "run", "--state-dir", state, "--tool", "flooder", "--tenant", "acme", "--policy", pol, "--", "/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("berm run: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "calls", "--state-dir", state, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var calls []audit.Call
	if err := json.Unmarshal(out, &calls); err != nil || len(calls) != 1 || calls[0].Record == nil {
		t.Fatalf("berm calls --json: %v\n%s", err, out)
	}
	r := calls[0].Record
	if r.Aggregated == 0 {
		t.Fatalf("the call stayed within its budget (%d events): the test floods nothing", r.Events)
	}
	pol1 := r.Surfaces[2]
	if pol1.Surface != event.SurfacePolicy || !pol1.Violated || pol1.Violations < tries || pol1.Violations != r.Denials[event.SurfacePolicy]+alertsOn(t, bin, state, r.CallKey, event.SurfacePolicy) {
		t.Errorf("policy surface %+v after %d refused writes (denials %v, %d aggregated)", pol1, tries, r.Denials, r.Aggregated)
	}
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, src := range [][]string{nil, {"--source", dsn}} {
		out, err := exec.Command(bin, append([]string{"matrix", "--state-dir", state, "--json", "--surface", "policy"}, src...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		var m audit.Matrix
		if err := json.Unmarshal(out, &m); err != nil || len(m.Tools) != 1 {
			t.Fatalf("berm matrix --json %v: %v\n%s", src, err, out)
		}
		if cell := m.Tools[0].Cells[0]; cell.Worst != event.StateViolated || cell.Violations != pol1.Violations {
			t.Errorf("matrix %v: policy cell %+v, want violated with %d violations", src, cell, pol1.Violations)
		}
	}
}

// alertsOn counts the call's alerts on a surface, from its timeline.
func alertsOn(t *testing.T, bin, state, key, surface string) uint64 {
	out, err := exec.Command(bin, "timeline", "--state-dir", state, "--json", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	var tl audit.TimelineJSON
	if err := json.Unmarshal(out, &tl); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, e := range tl.Events {
		if e.Kind == event.KindAlert && e.Alert.Surface == surface {
			n++
		}
		if e.Kind == event.KindAggregate && e.Aggregate.Kind == event.KindAlert {
			t.Fatalf("alerts aggregated: count them by surface some other way")
		}
	}
	return n
}
