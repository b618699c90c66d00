package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// The command lines' conventions, through the binaries as users run them (berm is the C
// front, which hands these to the Go front): -h and --help succeed and print the usage on
// stdout, --version and version say the build, a bad flag is one line on stderr and exit 2.
func TestCommandLinesHelpVersionAndBadFlags(t *testing.T) {
	for _, c := range []struct {
		name   string
		bin    string
		args   []string
		exit   int
		stdout []string // each must be in stdout
		stderr string   // the whole of stderr, when set
	}{
		{"berm -h lists every command", "berm", []string{"-h"}, 0,
			[]string{"berm run", "berm calls", "berm timeline", "berm matrix", "berm doctor", "berm approvals", "berm approve|deny", "berm policy check", "berm policy diff", "berm policy show-strict", "berm rules lint|test", "berm version"}, ""},
		{"berm --help", "berm", []string{"--help"}, 0, []string{"usage:"}, ""},
		{"berm help", "berm", []string{"help"}, 0, []string{"usage:"}, ""},
		{"berm version", "berm", []string{"version", "--no-probe"}, 0, []string{"berm ", "commit: ", "go: go1."}, ""},
		{"berm --version with the kernel's features", "berm", []string{"--version"}, 0, []string{"berm ", "commit: ", "go: go1.", "kernel: ", "layers: "}, ""},
		{"berm calls -h", "berm", []string{"calls", "-h"}, 0, []string{"usage: berm calls", "-state-dir"}, ""},
		{"berm timeline --help", "berm", []string{"timeline", "--help"}, 0, []string{"usage: berm timeline", "-all"}, ""},
		{"berm matrix -h", "berm", []string{"matrix", "-h"}, 0, []string{"usage: berm matrix"}, ""},
		{"berm doctor -h", "berm", []string{"doctor", "-h"}, 0, []string{"usage: berm doctor"}, ""},
		{"berm approvals -h", "berm", []string{"approvals", "-h"}, 0, []string{"usage: berm approvals"}, ""},
		{"berm approve -h", "berm", []string{"approve", "-h"}, 0, []string{"usage: berm approve"}, ""},
		{"berm deny -h", "berm", []string{"deny", "-h"}, 0, []string{"usage: berm deny"}, ""},
		{"berm policy -h", "berm", []string{"policy", "-h"}, 0, []string{"berm policy check", "show-strict"}, ""},
		{"berm policy check -h", "berm", []string{"policy", "check", "-h"}, 0, []string{"usage: berm policy check"}, ""},
		{"berm rules -h", "berm", []string{"rules", "-h"}, 0, []string{"berm rules lint", "berm rules test"}, ""},
		{"berm rules lint -h", "berm", []string{"rules", "lint", "-h"}, 0, []string{"usage: berm rules lint", "-shipped"}, ""},
		{"berm version -h", "berm", []string{"version", "-h"}, 0, []string{"usage: berm version"}, ""},
		{"berm calls with a bad flag", "berm", []string{"calls", "--bogus"}, 2, nil,
			"berm calls: flag provided but not defined: -bogus (berm calls -h lists the flags)\n"},
		{"berm matrix with a bad value", "berm", []string{"matrix", "--json=maybe"}, 2, nil,
			"berm matrix: invalid boolean value \"maybe\" for -json: parse error (berm matrix -h lists the flags)\n"},
		{"berm rules lint with a bad flag", "berm", []string{"rules", "lint", "--bogus"}, 2, nil,
			"berm rules lint: flag provided but not defined: -bogus (berm rules lint -h lists the flags)\n"},
		{"an unknown command", "berm", []string{"frobnicate"}, 2, nil, "berm: unknown command \"frobnicate\" (berm -h lists the commands)\n"},
		{"bermd -h", "bermd", []string{"-h"}, 0, []string{"usage: bermd", "-idle-exit duration\n", "-version"}, ""},
		{"bermd --version", "bermd", []string{"--version"}, 0, []string{"bermd ", "commit: ", "go: go1.", "kernel: "}, ""},
		{"bermd with a bad value", "bermd", []string{"--warm", "x"}, 2, nil, "bermd: invalid value \"x\" for flag -warm: parse error (bermd -h lists the flags)\n"},
		{"berm-collector -h", "berm-collector", []string{"-h"}, 0, []string{"usage: berm-collector", "-once"}, ""},
		{"berm-collector --version", "berm-collector", []string{"--version"}, 0, []string{"berm-collector ", "commit: "}, ""},
		{"berm-collector with a bad flag", "berm-collector", []string{"--bogus"}, 2, nil,
			"berm-collector: flag provided but not defined: -bogus (berm-collector -h lists the flags)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := bermbin.Run(t, exec.Command(bermbin.Path(t, c.bin), c.args...))
			if r.Exit != c.exit {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.Exit, c.exit, r.Stdout, r.Stderr)
			}
			for _, w := range c.stdout {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.Stdout)
				}
			}
			if c.stderr != "" && r.Stderr != c.stderr {
				t.Errorf("stderr:\n%q\nwant\n%q", r.Stderr, c.stderr)
			}
		})
	}
}
