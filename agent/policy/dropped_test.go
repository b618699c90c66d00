package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A policy that replaces one of strict's lists, or turns a switch off, is told which of
// strict's protections it drops; strict itself and a stricter policy drop nothing.
func TestDroppedNamesEachProtectionOfStrict(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    string
		want    []string // each a dropped line (substring)
		notWant []string
	}{
		{"strict itself", "  mode: enforce\n", nil, []string{""}},
		{"a six-entry deny list drops the rest of strict's", "  filesystem:\n    deny: [/etc/shadow, /root, /home, /var, /run, /proc/kcore]\n",
			[]string{"spec.filesystem.deny drops strict's /etc/ssh", "drops strict's /etc/sudoers"}, []string{"drops strict's /etc/shadow\n"}},
		{"a deny of a whole tree covers strict's entries in it", "  filesystem:\n    deny: [/etc, /root, /home, /var, /run, /proc/kcore, /usr/etc/npmrc, /usr/local/etc/npmrc, /sys/firmware]\n",
			nil, []string{"/etc/ssh", "/etc/shadow"}},
		{"audit mode", "  mode: audit\n", []string{"spec.mode is audit"}, nil},
		{"a switch off", "  syscalls:\n    denyFileWatch: false\n", []string{"spec.syscalls.denyFileWatch is off"}, nil},
		{"a short syscall deny list", "  syscalls:\n    deny: [mount]\n", []string{"spec.syscalls.deny drops strict's ptrace", "drops strict's pivot_root"}, []string{"drops strict's mount\n"}},
		{"netlink", "  network:\n    allowNetlink: true\n", []string{"spec.network.allowNetlink"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(header+"spec:\n"+c.spec))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(p.Dropped(), "\n") + "\n"
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("want %q among:\n%s", w, got)
				}
			}
			for _, w := range c.notWant {
				if w == "" && got != "\n" || w != "" && strings.Contains(got, w) {
					t.Errorf("did not want %q among:\n%s", w, got)
				}
			}
		})
	}
}

// berm policy check says ok and warns, naming what is dropped; a policy that keeps
// everything is a plain ok.
func TestCheckMainWarnsOfDroppedProtections(t *testing.T) {
	dir := t.TempDir()
	six := filepath.Join(dir, "six.yaml")
	strict := filepath.Join(dir, "strict.yaml")
	os.WriteFile(six, []byte(header+"spec:\n  filesystem:\n    deny: [/etc/shadow, /root, /home, /var, /run, /proc/kcore]\n"), 0o644)
	os.WriteFile(strict, StrictYAML(), 0o644)
	var out, errb bytes.Buffer
	if rc := CheckMain([]string{six, strict}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	if !strings.Contains(errb.String(), six+": warning: spec.filesystem.deny drops strict's /etc/ssh\n") {
		t.Errorf("no warning naming /etc/ssh:\n%s", errb.String())
	}
	if strings.Contains(errb.String(), strict+":") || !strings.Contains(out.String(), strict+": ok\n") ||
		!strings.Contains(out.String(), six+": ok, with ") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
}
