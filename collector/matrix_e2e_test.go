package collector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bermsec/berm/agent/probe"
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
		if err != nil && (!errors.As(err, &exit) || exit.ExitCode() >= 125 && exit.ExitCode() != 137) {
			t.Fatalf("berm %v: %v\n%s", args, err, out)
		}
	}
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}

	// BPF LSM decides whether a policy is degraded: one golden per kind of kernel.
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
