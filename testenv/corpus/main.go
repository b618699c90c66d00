// Command corpus measures detection coverage: it runs every behaviour of an attack corpus
// (atomic-red-team's Linux sh/bash atomics, atomics.json) and of a benign corpus (what tools
// really do, benign.json) as one `berm run` call each, under the strict policy, and reports
// per ATT&CK technique how many behaviours ran, were contained (a policy layer denied something)
// and raised an alert, and the benign behaviours that raised one (false positives).
//
//	go run ./testenv/corpus -berm bin/berm -rules rules/ruleset -out .corpus   # real calls (root)
//	go run ./testenv/corpus -replay .corpus -rules rules/ruleset               # the recorded timelines again, offline
//
// -replay re-evaluates the rules on the timelines a real run saved, without running anything:
// it is for writing rules; the figures that count are the real run's (its alerts are the agent's).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/rules"
)

type behaviour struct {
	File      string `json:"file"`
	Number    int    `json:"number"`
	GUID      string `json:"guid"`
	Technique string `json:"technique"`
	Name      string `json:"name"`
	Command   string `json:"command"`
	Executor  string `json:"executor"`
}

type corpusFile struct {
	Tests []behaviour `json:"tests"`
}

// outcome is what one call did, read from its timeline.
type outcome struct {
	ID        string   `json:"id"`
	Technique string   `json:"technique"`
	GUID      string   `json:"guid,omitempty"`
	Name      string   `json:"name"`
	Benign    bool     `json:"benign"`
	Ran       bool     `json:"ran"`
	Denied    int      `json:"denied"`
	Alerts    []string `json:"alerts"` // rule ids, deduplicated
	EndReason string   `json:"end_reason"`
}

type timeline struct {
	Call struct {
		Record struct {
			ExitCode  int    `json:"exit_code"`
			EndReason string `json:"end_reason"`
		} `json:"record"`
	} `json:"call"`
	Events []event.Event `json:"events"`
}

func main() {
	dir := flag.String("corpus", "testenv/corpus", "directory of atomics.json and benign.json")
	bin := flag.String("berm", "bin/berm", "berm binary")
	rulesDir := flag.String("rules", "rules/ruleset", "-replay: the rule files to evaluate (a real run uses the ruleset built into berm)")
	out := flag.String("out", ".corpus", "where each call's timeline is saved")
	replay := flag.String("replay", "", "re-evaluate the rules on the timelines saved in this directory instead of running calls")
	timeout := flag.Duration("timeout", 5*time.Second, "wall-time cap of each call")
	only := flag.String("only", "", "run only behaviours whose technique or GUID has this prefix")
	summary := flag.String("summary", "", "also write the summary table (markdown) to this file")
	flag.Parse()

	atk, err := load(filepath.Join(*dir, "atomics.json"))
	check(err)
	ben, err := load(filepath.Join(*dir, "benign.json"))
	check(err)

	var res []outcome
	if *replay != "" {
		res, err = replayAll(*replay, *rulesDir, atk, ben)
		check(err)
	} else {
		res, err = runAll(*bin, *out, *timeout, *only, atk, ben)
		check(err)
	}
	var md bytes.Buffer
	report(io.MultiWriter(os.Stdout), &md, res)
	if *summary != "" {
		check(os.WriteFile(*summary, md.Bytes(), 0o644))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "corpus:", err)
		os.Exit(1)
	}
}

func load(path string) ([]behaviour, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	var f corpusFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return f.Tests, nil
}

// callID names a behaviour's call: the atomic's GUID prefix, or the benign test's index.
func callID(b behaviour, i int, benign bool) string {
	if benign {
		return fmt.Sprintf("benign-%02d", i)
	}
	return fmt.Sprintf("atomic-%s-%d-%s", b.Technique, b.Number, b.GUID[:8])
}

func runAll(bin, out string, timeout time.Duration, only string, atk, ben []behaviour) ([]outcome, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	// Not under /tmp: the sandbox mounts a private /tmp over it.
	state, err := os.MkdirTemp("/var/tmp", "berm-corpus-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	var res []outcome
	run := func(b behaviour, i int, benign bool) error {
		id := callID(b, i, benign)
		shell := "/bin/sh"
		if b.Executor == "bash" {
			shell = "/bin/bash"
		}
		args := []string{"run", "--daemon", "never", "--state-dir", state, "--call-id", id, "--tool", "corpus",
			"--timeout", timeout.String(), "--", shell, "-c", b.Command}
		ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdin = nil
		var sink bytes.Buffer
		cmd.Stdout, cmd.Stderr = &sink, &sink
		_ = cmd.Run() // behaviours fail inside the sandbox on purpose
		data, err := exec.Command(bin, "timeline", id, "--state-dir", state, "--json").Output()
		if err != nil {
			return fmt.Errorf("berm timeline %s: %w (berm run said: %s)", id, err, tail(sink.String()))
		}
		if err := os.WriteFile(filepath.Join(out, id+".json"), data, 0o644); err != nil {
			return err
		}
		var tl timeline
		if err := json.Unmarshal(data, &tl); err != nil {
			return fmt.Errorf("timeline %s: %w", id, err)
		}
		o := measure(b, id, benign, &tl, nil)
		fmt.Fprintf(os.Stderr, "%-48s ran=%-5v denied=%-3d alerts=%s\n", id, o.Ran, o.Denied, strings.Join(o.Alerts, ","))
		res = append(res, o)
		return nil
	}
	for i, b := range atk {
		if only != "" && !strings.HasPrefix(b.Technique, only) && !strings.HasPrefix(b.GUID, only) {
			continue
		}
		if err := run(b, i, false); err != nil {
			return nil, err
		}
	}
	for i, b := range ben {
		if only != "" {
			break
		}
		b.Technique = "benign"
		b.Executor = "sh"
		if err := run(b, i, true); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

// replayAll evaluates rulesDir on every saved timeline, as the agent would have.
func replayAll(dir, rulesDir string, atk, ben []behaviour) ([]outcome, error) {
	set, err := rules.LoadFiles(rulesDir)
	if err != nil {
		return nil, err
	}
	var res []outcome
	do := func(b behaviour, i int, benign bool) error {
		id := callID(b, i, benign)
		data, err := os.ReadFile(filepath.Join(dir, id+".json"))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var tl timeline
		if err := json.Unmarshal(data, &tl); err != nil {
			return fmt.Errorf("timeline %s: %w", id, err)
		}
		res = append(res, measure(b, id, benign, &tl, rules.NewEngine(set, nil)))
		return nil
	}
	for i, b := range atk {
		if err := do(b, i, false); err != nil {
			return nil, err
		}
	}
	for i, b := range ben {
		b.Technique = "benign"
		if err := do(b, i, true); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// measure reads a call's timeline. With eng, alerts are the engine's on the recorded events
// (replay); without, the alerts the agent recorded.
//
// A behaviour ran when the tool did something beyond failing to find its programs: it executed
// a program other than its shell, or the policy denied it something, or it ended otherwise than
// with "command not found" (127).
func measure(b behaviour, id string, benign bool, tl *timeline, eng *rules.Engine) outcome {
	o := outcome{ID: id, Technique: b.Technique, GUID: b.GUID, Name: b.Name, Benign: benign, EndReason: tl.Call.Record.EndReason}
	seen := map[string]bool{}
	execs := 0
	for i := range tl.Events {
		ev := &tl.Events[i]
		switch ev.Kind {
		case event.KindDenial:
			o.Denied++
		case event.KindExec:
			if !(ev.UID == 0 && strings.HasPrefix(ev.Comm, "berm")) {
				execs++
			}
		case event.KindAlert:
			if eng == nil && ev.Alert != nil && !seen[ev.Alert.RuleID] && !harnessRule[ev.Alert.RuleID] {
				seen[ev.Alert.RuleID] = true
				o.Alerts = append(o.Alerts, ev.Alert.RuleID)
			}
			continue
		}
		if eng != nil {
			for _, a := range eng.Eval(ev) {
				if !seen[a.Alert.RuleID] && !harnessRule[a.Alert.RuleID] {
					seen[a.Alert.RuleID] = true
					o.Alerts = append(o.Alerts, a.Alert.RuleID)
				}
			}
		}
	}
	sort.Strings(o.Alerts)
	o.Ran = execs > 1 || o.Denied > 0 || tl.Call.Record.ExitCode != 127
	return o
}

// harnessRule are alerts the corpus does not count: the wall-time cap that fires them is the
// harness's (-timeout, seconds), not the policy's (minutes), so any slow behaviour would count.
var harnessRule = map[string]bool{"resource-wall-time": true}

type tally struct{ tests, ran, contained, alerted int }

func report(w io.Writer, md io.Writer, res []outcome) {
	per := map[string]*tally{}
	var all, ben tally
	var fps, misses []outcome
	for _, o := range res {
		t := &ben
		if !o.Benign {
			if per[o.Technique] == nil {
				per[o.Technique] = &tally{}
			}
			t = per[o.Technique]
		}
		t.tests++
		if o.Ran {
			t.ran++
		}
		if o.Denied > 0 {
			t.contained++
		}
		if len(o.Alerts) > 0 {
			t.alerted++
		}
		if o.Benign {
			if len(o.Alerts) > 0 {
				fps = append(fps, o)
			}
			continue
		}
		all.tests++
		if o.Ran {
			all.ran++
			if len(o.Alerts) > 0 {
				all.alerted++
			} else {
				misses = append(misses, o)
			}
		}
		if o.Denied > 0 {
			all.contained++
		}
	}
	techs := make([]string, 0, len(per))
	for t := range per {
		techs = append(techs, t)
	}
	sort.Strings(techs)
	fmt.Fprintf(w, "%-12s %5s %5s %9s %7s\n", "technique", "tests", "ran", "contained", "alerted")
	for _, t := range techs {
		p := per[t]
		fmt.Fprintf(w, "%-12s %5d %5d %9d %7d\n", t, p.tests, p.ran, p.contained, p.alerted)
	}
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	fmt.Fprintf(w, "\nattack corpus: %d behaviours in %d techniques; %d ran; contained (denied) %d; alerted %d of those that ran (%.1f%%)\n",
		all.tests, len(techs), all.ran, all.contained, all.alerted, pct(all.alerted, all.ran))
	fmt.Fprintf(w, "benign corpus: %d behaviours; %d ran; %d denied; false positives %d\n", ben.tests, ben.ran, ben.contained, len(fps))
	for _, o := range fps {
		fmt.Fprintf(w, "  FALSE POSITIVE %s (%s): %s\n", o.ID, o.Name, strings.Join(o.Alerts, ","))
	}
	for _, o := range misses {
		fmt.Fprintf(w, "  no alert: %s %s (denied %d)\n", o.ID, o.Name, o.Denied)
	}

	fmt.Fprintf(md, "| corpus | behaviours | ran | contained (denied) | alerted | alerted of those that ran |\n|---|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(md, "| attack (atomic-red-team, %d techniques) | %d | %d | %d | %d | %.1f%% |\n", len(techs), all.tests, all.ran, all.contained, all.alerted, pct(all.alerted, all.ran))
	fmt.Fprintf(md, "| benign | %d | %d | %d | %d (false positives) | |\n", ben.tests, ben.ran, ben.contained, len(fps))
	fmt.Fprintf(md, "\n| technique | behaviours | ran | contained (denied) | alerted |\n|---|---:|---:|---:|---:|\n")
	for _, t := range techs {
		p := per[t]
		fmt.Fprintf(md, "| %s | %d | %d | %d | %d |\n", t, p.tests, p.ran, p.contained, p.alerted)
	}
	if len(misses) > 0 {
		fmt.Fprintf(md, "\nBehaviours that ran and raised no alert:\n\n")
		for _, o := range misses {
			fmt.Fprintf(md, "- %s (%s, %s)\n", o.ID, o.Name, o.GUID)
		}
	}
}
