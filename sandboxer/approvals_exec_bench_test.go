package sandboxer_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// What exec rules cost an ungated exec: every exec of such a call is held at the approval
// filter, read by the supervisor (on a thread of its own) and continued, and the exec hook
// looks the file up. The tool times 300 execs of /bin/true itself, in a call with an exec rule
// (on another program) and in its peer, the same policy without it; the ratio is the figure.
func BenchmarkApprovalExecUngated(b *testing.B) {
	bermbin.RequireRoot(b)
	const n = 300
	loop := `s=$(date +%s%N); i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do /bin/true; i=$((i+1)); done; e=$(date +%s%N); echo ns=$((e-s))`
	pols := map[string]string{}
	for name, rules := range map[string]string{
		"peer":      "      - {name: del, match: {unlink: \"${WORKSPACE}/reports/**\"}}\n",
		"exec-rule": "      - {name: del, match: {unlink: \"${WORKSPACE}/reports/**\"}}\n      - {name: psql, match: {exec: /usr/bin/touch, argv: drop}}\n",
	} {
		p := filepath.Join(b.TempDir(), name+".yaml")
		os.WriteFile(p, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bench}\nspec:\n  approvals:\n    rules:\n"+rules), 0o644)
		pols[name] = p
	}
	per := map[string]float64{}
	for i := 0; i < b.N; i++ {
		for _, name := range []string{"peer", "exec-rule"} {
			a := newApprovals(b)
			r := <-startRun(b, a.env, "--state-dir", b.TempDir(), "--call-id", "bench-"+name+"-"+strconv.Itoa(i), "--policy", pols[name], "--", "sh", "-c", loop)
			v, ok := strings.CutPrefix(strings.TrimSpace(r.Stdout), "ns=")
			ns, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				b.Fatalf("%s: %+v", name, r)
			}
			per[name] += ns / n
		}
	}
	b.ReportMetric(per["peer"]/float64(b.N), "ns/exec-peer")
	b.ReportMetric(per["exec-rule"]/float64(b.N), "ns/exec-held")
	b.ReportMetric(per["exec-rule"]/per["peer"], "held/peer")
}
