package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// berm policy diff A B: the settings one has and the other lacks, each on a line; the same
// policy (a copy of strict, or strict reordered) is no difference.
func TestPolicyDiff(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	copyOfStrict := write("copy.yaml", string(StrictYAML()))
	six := write("six.yaml", header+"spec:\n  filesystem:\n    deny: [/etc/shadow, /root, /home, /var, /run, /proc/kcore]\n")
	netlink := write("netlink.yaml", header+"spec:\n  network:\n    allowNetlink: true\n")
	for _, c := range []struct {
		name    string
		a, b    string
		rc      int
		want    []string
		notWant []string
	}{
		{"strict and a copy of it", "strict", copyOfStrict, 0, []string{"are the same policy"}, []string{"- ", "+ "}},
		{"a replaced deny list", "strict", six, 1, []string{`- spec.filesystem.deny[]: "/etc/ssh"`}, []string{`"/etc/shadow"`}},
		{"a switch", "strict", netlink, 1, []string{"- spec.network.allowNetlink: false", "+ spec.network.allowNetlink: true"}, nil},
		{"the other way round", netlink, "strict", 1, []string{"+ spec.network.allowNetlink: false"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			rc := DiffMain([]string{c.a, c.b}, &out, &errb)
			if rc != c.rc {
				t.Fatalf("exit %d, want %d\n%s%s", rc, c.rc, out.String(), errb.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("want %q in:\n%s", w, out.String())
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("did not want %q in:\n%s", w, out.String())
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if rc := DiffMain([]string{"strict"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "usage: berm policy diff A B") {
		t.Errorf("one argument: exit %d, %q", rc, errb.String())
	}
}
