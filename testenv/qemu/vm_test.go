package qemu

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const head = "\x1bc\x1b[?7lSeaBIOS (version 1.16.2)\r\nBooting from ROM..berm-vm: kernel 6.1.0-56-amd64 lsm=lockdown,capability,landlock,yama,bpf\r\n"
	for _, c := range []struct {
		name, log string
		want      []string // Check(TestA, TestB) error parts; none: passes
		exit      int
		kernel    string
	}{
		{"all passed", head + "=== RUN   TestA\r\n--- PASS: TestA (0.1s)\r\n=== RUN   TestB\r\n    --- FAIL: TestB/sub (0.0s)\r\n--- PASS: TestB (0.2s)\r\nPASS\r\nberm-vm: exit 0\r\n[ 9.3] reboot: Power down\r\n",
			nil, 0, "6.1.0-56-amd64 lsm=lockdown,capability,landlock,yama,bpf"},
		{"one failed", head + "--- PASS: TestA (0.1s)\r\n--- FAIL: TestB (0.2s)\r\nFAIL\r\nberm-vm: exit 1\r\n",
			[]string{"exit status 1", "TestB: FAIL"}, 1, "6.1.0-56-amd64 lsm=lockdown,capability,landlock,yama,bpf"},
		{"skipped is not passed", head + "--- PASS: TestA (0.1s)\r\n--- SKIP: TestB (0.0s)\r\nPASS\r\nberm-vm: exit 0\r\n",
			[]string{"TestB: SKIP"}, 0, "6.1.0-56-amd64 lsm=lockdown,capability,landlock,yama,bpf"},
		{"test binary killed", head + "--- PASS: TestA (0.1s)\r\n[ 5.0] Kernel panic - not syncing\r\n",
			[]string{"exit status -1", "TestB: not run"}, -1, "6.1.0-56-amd64 lsm=lockdown,capability,landlock,yama,bpf"},
		{"never booted", "SeaBIOS\r\n", []string{"never ran /init", "TestA: not run"}, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Parse([]byte(c.log))
			if r.Exit != c.exit || r.Kernel != c.kernel {
				t.Errorf("exit %d kernel %q, want %d %q", r.Exit, r.Kernel, c.exit, c.kernel)
			}
			if strings.Contains(r.Output, "\r") {
				t.Errorf("output keeps CRs: %q", r.Output)
			}
			err := r.Check("TestA", "TestB")
			if len(c.want) == 0 {
				if err != nil {
					t.Errorf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check passed, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// The newc layout the kernel's initramfs unpacker reads: 110-byte ASCII header, name padded
// with NULs to 4 bytes, data padded to 4 bytes, a TRAILER!!! entry at the end.
func TestWriteCPIO(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCPIO(&b, []Entry{File("init", 0o755, []byte("hi")), CharDev("dev/console", 5, 1), Symlink("bin/sh", "busybox")}); err != nil {
		t.Fatal(err)
	}
	want := "070701" + "00000001" + "000081ED" + "00000000" + "00000000" + "00000001" + "00000000" + "00000002" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000005" + "00000000" + "init\x00" + "\x00" + "hi\x00\x00" +
		"070701" + "00000002" + "00002180" + "00000000" + "00000000" + "00000001" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000005" + "00000001" + "0000000C" + "00000000" + "dev/console\x00" + "\x00\x00" +
		"070701" + "00000003" + "0000A1FF" + "00000000" + "00000000" + "00000001" + "00000000" + "00000007" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000007" + "00000000" + "bin/sh\x00" + "\x00\x00\x00" + "busybox\x00" +
		"070701" + "00000000" + "00000000" + "00000000" + "00000000" + "00000001" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000000" + "00000000" + "0000000B" + "00000000" + "TRAILER!!!\x00" + "\x00\x00\x00"
	if got := b.String(); got != want {
		t.Errorf("cpio:\n got  %q\n want %q", got, want)
	}
}
