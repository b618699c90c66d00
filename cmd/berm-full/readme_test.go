package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// readmeCommands are the command lines of README.md's "Using it" block, continuation lines
// joined: each starts with the binary and its subcommand words.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bermbin.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Using it\n")
	if !ok {
		t.Fatal("README.md has no \"## Using it\" section")
	}
	var cmds []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		code, ok := strings.CutPrefix(line, "    ")
		if !ok {
			continue
		}
		if strings.HasPrefix(code, "berm") {
			cmds = append(cmds, code)
		} else if len(cmds) > 0 && strings.HasPrefix(code, " ") {
			cmds[len(cmds)-1] += " " + strings.TrimSpace(code)
		}
	}
	if len(cmds) < 10 {
		t.Fatalf("README.md's Using it block has %d command lines", len(cmds))
	}
	return cmds
}

var (
	readmeFlag = regexp.MustCompile(`(?:^|[\s\[])--([a-z][a-z0-9-]*)`)
	subWord    = regexp.MustCompile(`^[a-z][a-z-]*$`)
)

// README and the program agree: every command README shows answers -h, and every flag it
// shows for a command is one that command's -h lists.
func TestReadmeCommandLinesAgreeWithHelp(t *testing.T) {
	for _, line := range readmeCommands(t) {
		code, _, _ := strings.Cut(line, "#")
		words := strings.Fields(code)
		bin, sub := words[0], []string{}
		for _, w := range words[1:] {
			if !subWord.MatchString(w) {
				break
			}
			sub = append(sub, w)
		}
		if len(sub) > 0 && strings.Contains(sub[0], "|") {
			sub = sub[:0]
		}
		name := strings.Join(append([]string{bin}, sub...), " ")
		t.Run(name, func(t *testing.T) {
			target := bin
			if bin == "berm" {
				target = "berm-full" // the C front hands every command but a call to it
			}
			r := bermbin.Run(t, exec.Command(bermbin.Path(t, target), append(sub, "-h")...))
			if r.Exit != 0 {
				t.Fatalf("%s -h: exit %d\n%s%s", name, r.Exit, r.Stdout, r.Stderr)
			}
			help := r.Stdout + r.Stderr
			for _, m := range readmeFlag.FindAllStringSubmatch(code, -1) {
				if !strings.Contains(help, "-"+m[1]+" ") && !strings.Contains(help, "-"+m[1]+"\n") {
					t.Errorf("README shows %s --%s, which %s -h does not list:\n%s", name, m[1], name, help)
				}
			}
		})
	}
}
