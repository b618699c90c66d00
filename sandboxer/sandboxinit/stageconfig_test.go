package sandboxinit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/testenv/bermbin"
)

func stageSource(t *testing.T) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "cmd", "berm-stage", "main.c"))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// berm-stage (cmd/berm-stage/main.c) reads what encodeStage writes: its constants are these.
func TestStageConstants(t *testing.T) {
	src := stageSource(t)
	for name, want := range map[string]string{
		"STAGE_MAGIC":      fmt.Sprintf("%#xu", stageMagic),
		"FLAG_TERMINAL":    strconv.Itoa(stageTerminal) + "u",
		"FLAG_TERM_STDOUT": strconv.Itoa(stageTermStdout) + "u",
		"FLAG_TERM_STDERR": strconv.Itoa(stageTermStderr) + "u",
		"FLAG_LANDLOCK":    strconv.Itoa(stageLandlock) + "u",
		"MAX_CONFIG":       "(" + strconv.Itoa(stageMaxConfig>>20) + "u << 20)",
		"STAGE_UP":         "'" + string(rune(stageUp)) + "'",
		"STAGE_START":      "'" + string(rune(stageStart)) + "'",
		"STAGE_LISTENER":   "'" + string(rune(stageListener)) + "'",
	} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (.+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("main.c defines no %s", name)
		} else if string(m[1]) != want {
			t.Errorf("main.c: %s is %s, stageconfig.go's is %s", name, m[1], want)
		}
	}
}

// The real berm-stage reads back every field encodeStage wrote (its --dump prints them), to the
// last byte: the two sides of the format cannot drift apart unnoticed.
func TestStageReadsTheConfiguration(t *testing.T) {
	stage := bermbin.Path(t, StageBinary)
	seccomp := Program{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, {Code: unix.BPF_RET | unix.BPF_K, Jt: 1, Jf: 2, K: unix.SECCOMP_RET_ALLOW}}
	for _, tc := range []struct {
		name string
		cfg  toolConfig
	}{
		{"bare", toolConfig{Argv: []string{"/bin/true"}, Dir: "/"}},
		{"everything", toolConfig{
			Argv: []string{"sh", "-c", `echo "a b" \ $HOME`, ""}, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "X=é€"},
			Dir: "/workspace/with space",
			Landlock: &landlock.Ruleset{HandledFS: 0x7fff, HandledNet: 3, Scoped: 1,
				Paths: []landlock.PathRule{{Path: "/usr", Access: 0x1f}, {Path: "/workspace/with space", Access: 0x7fff}},
				Ports: []landlock.PortRule{{Port: 443, Access: 2}, {Port: 65535, Access: 1}}},
			Seccomp:   seccomp,
			Approvals: seccomp[1:],
			Terminal:  &Terminal{Stdout: true, Stderr: true},
		}},
		{"terminal for stdin only, landlock without rules", toolConfig{Argv: []string{"a"}, Dir: "/", Terminal: &Terminal{},
			Landlock: &landlock.Ruleset{HandledFS: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, _, out, errOut := startStageWith(t, exec.Command(stage, "--dump"), tc.cfg)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("berm-stage --dump: %v\n%s%s", err, errOut.Bytes(), out.Bytes())
			}
			if got, want := out.String(), dumpOf(tc.cfg, setIDFilter()); got != want {
				t.Errorf("berm-stage read:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// startStageWith starts cmd (berm-stage) with its channel on fd 3 and files after it (closed
// here once it has them), and sends it cfg with this process's stdin. The channel closes with
// the test.
func startStageWith(t *testing.T, cmd *exec.Cmd, cfg toolConfig, files ...*os.File) (_ *exec.Cmd, ch *os.File, stdout, stderr *bytes.Buffer) {
	t.Helper()
	msg, err := encodeStage(cfg, setIDFilter())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
	t.Cleanup(func() { ours.Close() })
	cmd.ExtraFiles = append([]*os.File{theirs}, files...)
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := sendStage(ours, msg, int(os.Stdin.Fd())); err != nil {
		t.Fatal(err)
	}
	return cmd, ours, stdout, stderr
}

// dumpOf is what berm-stage --dump prints for cfg.
func dumpOf(cfg toolConfig, setid []unix.SockFilter) string {
	var b strings.Builder
	var flags uint32
	if cfg.Terminal != nil {
		flags |= stageTerminal
		if cfg.Terminal.Stdout {
			flags |= stageTermStdout
		}
		if cfg.Terminal.Stderr {
			flags |= stageTermStderr
		}
	}
	if cfg.Landlock != nil {
		flags |= stageLandlock
	}
	fmt.Fprintf(&b, "flags %d\ndir %s\n", flags, cfg.Dir)
	for _, a := range cfg.Argv {
		fmt.Fprintf(&b, "arg %s\n", a)
	}
	for _, e := range cfg.Env {
		fmt.Fprintf(&b, "env %s\n", e)
	}
	if ll := cfg.Landlock; ll != nil {
		fmt.Fprintf(&b, "landlock %d %d %d\n", ll.HandledFS, ll.HandledNet, ll.Scoped)
		for _, p := range ll.Paths {
			fmt.Fprintf(&b, "path %d %s\n", p.Access, p.Path)
		}
		for _, p := range ll.Ports {
			fmt.Fprintf(&b, "port %d %d\n", p.Access, p.Port)
		}
	}
	for _, p := range [][]unix.SockFilter{cfg.Seccomp, setid, cfg.Approvals} {
		fmt.Fprintf(&b, "prog %d", len(p))
		for _, f := range p {
			fmt.Fprintf(&b, " %d:%d:%d:%d", f.Code, f.Jt, f.Jf, f.K)
		}
		b.WriteString("\n")
	}
	b.WriteString("end 1\n")
	return b.String()
}

func TestEncodeStageRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  toolConfig
		want string
	}{
		{"no argv", toolConfig{Dir: "/"}, "no argv"},
		{"NUL in an argument", toolConfig{Argv: []string{"a\x00b"}}, "NUL byte"},
		{"NUL in a rule path", toolConfig{Argv: []string{"a"}, Landlock: &landlock.Ruleset{HandledFS: 1, Paths: []landlock.PathRule{{Path: "/a\x00"}}}}, "NUL byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := encodeStage(tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("encodeStage: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// The real stage confines itself and executes the tool, or says why not as the launcher
// reports it (code and text): a Landlock rule path that no longer exists is no rule (less
// access, never more), and what Landlock does not grant stays refused to the tool.
func TestStageRuns(t *testing.T) {
	stage := bermbin.Path(t, StageBinary)
	const rights = 1 | 4 | 8 // execute, read file, read dir
	confined := &landlock.Ruleset{HandledFS: rights, Paths: []landlock.PathRule{
		{Path: "/usr", Access: rights}, {Path: "/nonexistent-berm-stage-test", Access: rights}, {Path: "/etc", Access: rights}}}
	env := []string{"PATH=/nonexistent-dir:/usr/bin/"}
	// A file without an execute bit: root may not execute it either.
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     toolConfig
		code    int
		failure string // the failure the stage reports ("": the tool ran)
		stdout  string
	}{
		{"confined", toolConfig{Argv: []string{"sh", "-c", "cat /etc/hostname >/dev/null && echo read; cat /proc/self/status >/dev/null 2>&1 || echo refused"},
			Env: env, Dir: "/", Landlock: confined}, 0, "", "read\nrefused\n"},
		{"no such directory", toolConfig{Argv: []string{"true"}, Env: env, Dir: "/nonexistent-berm-stage-test"},
			126, "chdir /nonexistent-berm-stage-test: no such file or directory", ""},
		{"not in the call's PATH", toolConfig{Argv: []string{"no-such-tool-berm"}, Env: env, Dir: "/"},
			127, "exec: no-such-tool-berm: not found in the call's PATH", ""},
		{"not executable", toolConfig{Argv: []string{plain}, Env: env, Dir: "/"},
			126, "fork/exec " + plain + ": permission denied", ""},
		{"the exit status is the tool's", toolConfig{Argv: []string{"sh", "-c", "exit 7"}, Env: env, Dir: "/"}, 7, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failR, failW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer failR.Close()
			cmd, ours, out, errOut := startStageWith(t, exec.Command(stage), tc.cfg, failW)
			if _, err := ours.Write([]byte{stageStart}); err != nil {
				t.Fatal(err)
			}
			reported, _ := io.ReadAll(failR)
			err = cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if len(reported) == 0 || reported[0] != stageUp {
				t.Fatalf("the stage reported %q, want %q first", reported, stageUp)
			}
			var tf toolFailure
			if rest := reported[1:]; len(rest) > 0 {
				if err := json.Unmarshal(rest, &tf); err != nil {
					t.Fatalf("the stage's failure %q: %v", rest, err)
				}
			}
			if code != tc.code || tf.Error != tc.failure || (tc.failure != "" && tf.Code != tc.code) || out.String() != tc.stdout {
				t.Errorf("exit %d, failure %+v, stdout %q; want exit %d, failure %q, stdout %q (stderr %q)",
					code, tf, out.String(), tc.code, tc.failure, tc.stdout, errOut.String())
			}
		})
	}
}
