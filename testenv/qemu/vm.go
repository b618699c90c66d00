package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Cmdline boots with BPF LSM active (Debian's default lsm= list lacks it) and makes any
// panic end the VM at once (-no-reboot turns the reboot into qemu's exit).
const Cmdline = "console=ttyS0 lsm=lockdown,capability,landlock,yama,bpf panic=-1 quiet loglevel=3"

// Boot runs the VM until it powers off and returns its serial console output (CRLF turned
// into LF). TCG only: this machine's /dev/kvm cannot boot stock kernels. 1 GiB, two CPUs: a
// thread racing a syscall's path (agent/lsm's TestVMKernelViewOfForgedPaths) needs its own.
func Boot(ctx context.Context, kernel, initrd string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-M", "q35", "-accel", "tcg", "-m", "1G", "-smp", "2",
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", Cmdline)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	log := bytes.ReplaceAll(out.Bytes(), []byte("\r\n"), []byte("\n"))
	if ctx.Err() != nil {
		return log, fmt.Errorf("qemu: %w", ctx.Err())
	}
	if err != nil {
		return log, fmt.Errorf("qemu: %w", err)
	}
	return log, nil
}

// Result is what the test binary reported in the VM.
type Result struct {
	Exit    int               // the test binary's exit status; -1 when it never finished
	Tests   map[string]string // top-level test -> PASS, FAIL or SKIP
	Kernel  string            // "berm-vm: kernel" line: release and active LSMs
	Output  string            // the test binary's output
	Summary string            // go test's final PASS/FAIL line
}

const kernelMarker = "berm-vm: kernel "

var (
	testRE = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) `)
	exitRE = regexp.MustCompile(`^berm-vm: exit (\d+)$`)
)

// Parse reads the serial log of a VM run.
func Parse(log []byte) Result {
	r := Result{Exit: -1, Tests: map[string]string{}}
	var out []string
	started := false
	for _, line := range strings.Split(string(log), "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.Contains(line, kernelMarker): // firmware output may precede it on the line
			r.Kernel = line[strings.Index(line, kernelMarker)+len(kernelMarker):]
			started = true
			continue
		case exitRE.MatchString(line):
			r.Exit, _ = strconv.Atoi(exitRE.FindStringSubmatch(line)[1])
			started = false
			continue
		}
		if !started {
			continue
		}
		out = append(out, line)
		if m := testRE.FindStringSubmatch(line); m != nil {
			r.Tests[m[2]] = m[1]
		}
		if line == "PASS" || line == "FAIL" {
			r.Summary = line
		}
	}
	r.Output = strings.Join(out, "\n")
	return r
}

// Check says whether the run passed: the test binary finished with status 0 and every one of
// want passed (a skipped test did not test anything).
func (r Result) Check(want ...string) error {
	var errs []error
	if r.Kernel == "" {
		errs = append(errs, errors.New("the VM never ran /init to the test"))
	}
	if r.Exit != 0 {
		errs = append(errs, fmt.Errorf("test binary exit status %d", r.Exit))
	}
	for _, name := range want {
		if got := r.Tests[name]; got != "PASS" {
			if got == "" {
				got = "not run"
			}
			errs = append(errs, fmt.Errorf("%s: %s", name, got))
		}
	}
	return errors.Join(errs...)
}
