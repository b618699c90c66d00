package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/cmd/internal/ptyrelay"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/callproto"
)

func init() {
	extraCommands["approvals"] = cmdApprovals
	extraCommands["approve"] = func(args []string) int { return cmdDecide(args, true) }
	extraCommands["deny"] = func(args []string) int { return cmdDecide(args, false) }
}

// embeddedApprovals is the embedded run's broker, serving the approval API on a socket of
// its own while the call runs, when the call's policy holds actions for approval. stop ends
// the API (nil broker: nothing to stop).
func embeddedApprovals(spec sandboxer.Spec, log *slog.Logger, msgs io.Writer, term *ptyrelay.Relay, live approval.Scrubber, webhookURL, webhookSecret string) (b *approval.Broker, stop func() error, err error) {
	stop = func() error { return nil }
	if len(spec.Policy.Spec.Approvals.Rules) == 0 || spec.Policy.Spec.Mode != policy.Enforce {
		return nil, stop, nil
	}
	var hook *approval.Webhook
	if webhookURL != "" {
		if webhookSecret == "" {
			return nil, stop, errors.New("--approval-webhook needs --approval-webhook-secret (the HMAC key file)")
		}
		key, err := approval.ReadToken(webhookSecret)
		if err != nil {
			return nil, stop, err
		}
		hook = &approval.Webhook{URL: webhookURL, Secret: []byte(key), Log: log}
	}
	// With a terminal, the person at it is asked (as sudo asks); without one, a line on
	// stderr says how to decide from another terminal.
	var prompt approval.Prompter = stderrNotice{msgs}
	if term != nil {
		prompt = ttyPrompt{term}
	}
	who, err := approval.LoadApprovers(envOr("BERM_APPROVERS", approval.DefaultApproversFile))
	if err != nil {
		return nil, stop, err
	}
	if b, err = approval.New(approval.Config{Log: log, Prompt: prompt, Approvers: who, Webhook: hook, Secrets: live}); err != nil {
		return nil, stop, err
	}
	token, err := approval.LoadToken(envOr("BERM_APPROVALS_TOKEN", approval.DefaultTokenFile))
	if err != nil {
		return nil, stop, err
	}
	_, stop, err = approval.Serve(b, token, envOr("BERM_APPROVALS_DIR", approval.DefaultDir), "run-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		return nil, func() error { return nil }, err
	}
	return b, stop, nil
}

// ttyPrompt asks at the caller's terminal. The relay holds the tool's output while the
// question is open and resets the terminal before it (ptyrelay.Prompt): the question is the
// last thing on the screen, drawn as written. Every field is escaped by the broker (a name
// with ESC in it shows its escapes), and the question names what the tool cannot know when it
// draws a forgery: the request's random id, repeated where the answer is typed.
type ttyPrompt struct{ relay *ptyrelay.Relay }

func (p ttyPrompt) Ask(r *approval.Request, abandon <-chan struct{}) (bool, string, string, bool) {
	line, ok := p.relay.Prompt(question(r), abandon)
	if !ok {
		return false, "", "", false
	}
	line = strings.ToLower(strings.TrimSpace(line))
	return line == "y" || line == "yes", whoAmI(), "answered at the terminal", true
}

// question is the terminal prompt's text for r (whose fields the broker escaped).
func question(r *approval.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\r\n[berm] approval request %s: the tool's output waits until you answer\r\n", r.ID)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "[berm]   %-7s %s\r\n", k+":", approval.EscapeControls(v))
		}
	}
	row("tool", r.Tool)
	row("action", r.Action+" ("+r.Syscall+")")
	row("object", r.Object)
	row("inode", r.Inode)
	row("rule", r.Rule)
	fmt.Fprintf(&b, "[berm] Allow request %s? [y/N] ", r.ID)
	return b.String()
}

// stderrNotice asks nobody: it says on berm's messages (stderr, or --messages) that a
// request waits and how to decide it.
type stderrNotice struct{ w io.Writer }

func (n stderrNotice) Ask(r *approval.Request, _ <-chan struct{}) (bool, string, string, bool) {
	fmt.Fprintf(n.w, "berm: waiting for approval %s: %s %s (rule %s); decide with berm approve %s or berm deny %s (no answer by %s denies)\n",
		r.ID, r.Action, approval.EscapeControls(r.Object), r.Rule, r.ID, r.ID, r.Deadline.Format(time.TimeOnly))
	return false, "", "", false
}

func whoAmI() string {
	for _, k := range []string{"SUDO_USER", "USER"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// approvals is where berm approvals, approve and deny go: the approval API of every process
// serving one (root, with the token; an approver of the approvers file as its unix user), or
// bermd's control socket (a caller that is not root: bermd decides from its credentials and
// the decide right of bermd --access).
type approvals struct {
	api    *approval.Client
	socket string // bermd's, when not empty
}

func approvalClient(fs *flag.FlagSet, args []string) (*approvals, error) {
	dir := fs.String("dir", envOr("BERM_APPROVALS_DIR", approval.DefaultDir), "directory of the approval API sockets")
	tokenFile := fs.String("token", envOr("BERM_APPROVALS_TOKEN", approval.DefaultTokenFile), "the API's bearer token file (root-only)")
	socket := fs.String("socket", "", "a caller that is not root: bermd's socket (default $BERM_SOCKET, else "+callproto.DefaultSocket+"); bermd lists and decides the tenants the caller has the decide right in")
	if code, done := parseFlags(fs, args); done {
		return nil, exitCode(code)
	}
	named := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { named[f.Name] = true })
	if os.Getuid() != 0 && !named["dir"] && !named["token"] {
		// Not root: through bermd, when one answers (the approval API of an embedded run,
		// or of an approver's own, stays reachable with --dir).
		sock := *socket
		if sock == "" {
			sock = bermdSocket()
		}
		if named["socket"] || callproto.Available(sock) {
			return &approvals{socket: sock}, nil
		}
	}
	tok, err := approval.ReadToken(*tokenFile)
	if err != nil && os.Getuid() == 0 {
		return nil, err
	}
	// Not root: no token; the API knows the caller by its unix user (an approver's, in the
	// approvers file, or refused).
	return &approvals{api: &approval.Client{Dir: *dir, Token: tok}}, nil
}

func (a *approvals) List() ([]approval.PendingView, error) {
	if a.api != nil {
		return a.api.List()
	}
	rep, err := callproto.Read(a.socket, &callproto.ReadRequest{Read: callproto.ReadApprovals})
	if err != nil {
		return nil, fmt.Errorf("bermd: %w", err)
	}
	var list []approval.PendingView
	if err := json.Unmarshal(rep.Approvals, &list); err != nil {
		return nil, fmt.Errorf("bermd's approvals: %w", err)
	}
	return list, nil
}

func (a *approvals) Decide(id string, approve bool, by, reason string) error {
	if a.api != nil {
		return a.api.Decide(id, approve, by, reason)
	}
	if by != "" {
		return errors.New("--by: only root names who decides (bermd records you as who the kernel says you are)")
	}
	d := callproto.Deny
	if approve {
		d = callproto.Approve
	}
	if _, err := callproto.Decide(a.socket, &callproto.DecideRequest{ID: id, Decision: d, Reason: reason}); err != nil {
		return fmt.Errorf("bermd: %w", err)
	}
	return nil
}

// berm approvals [--json]: what is pending, for every process holding requests.
func cmdApprovals(args []string) int {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	c, err := approvalClient(fs, args)
	if err != nil {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		return fail("%v", err)
	}
	list, err := c.List()
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(list)
		return 0
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCALL\tTENANT\tTOOL\tACTION\tOBJECT\tRULE\tAGE")
	for _, p := range list {
		// The API escapes every field; escaped again here (controls only, so nothing is
		// doubled): a table on a terminal never carries a control character from anyone.
		e := approval.EscapeControls
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e(p.ID), e(p.CallID), e(p.Tenant), e(p.Tool), e(p.Action), e(p.Object), e(p.Rule),
			time.Duration(p.AgeSeconds*float64(time.Second)).Round(time.Second))
	}
	w.Flush()
	return 0
}

// berm approve|deny ID [--reason TEXT]
func cmdDecide(args []string, approve bool) int {
	name := "deny"
	if approve {
		name = "approve"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	reason := fs.String("reason", "", "why (recorded in the trail)")
	by := fs.String("by", "", "who decides (root only; default: the user running berm; others are who they are)")
	// The id may come before or after the flags.
	var id string
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	c, err := approvalClient(fs, args)
	if err != nil {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		return fail("%v", err)
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	}
	if id == "" {
		return fail("usage: berm %s ID [--reason TEXT]", name)
	}
	who := *by
	if who == "" && os.Getuid() == 0 {
		who = whoAmI()
	}
	if err := c.Decide(id, approve, who, *reason); err != nil {
		return fail("%v", err)
	}
	return 0
}

// exitCode is a command that ended while reading its flags (its usage printed, or a bad flag
// said), with this status.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }
