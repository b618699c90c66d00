package sandboxer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// Bounds of a credential's commands, which run outside the sandbox as berm's own user.
const (
	credentialCmdTimeout = 10 * time.Second
	credentialMaxBytes   = 64 << 10
)

// issued is a brokered credential of the running call. Its value lives here and in the
// node's registry until the call ends, nowhere else of berm's.
type issued struct {
	cred   policy.Credential
	value  []byte
	fp     string
	remove func() // out of the node's registry
	// placeholder is what the tool gets of an injected credential (inject.go); the value
	// stays in berm. removePH takes it out of the registry.
	placeholder []byte
	removePH    func()

	mu      sync.Mutex
	revoked string // the revoke's result once it ran ("" before, or with no revoke command)
	done    bool
	leaks   atomic.Uint64
	expiry  *time.Timer
}

func (c *issued) delivery() string {
	d := "file " + c.cred.Deliver.File
	if c.cred.Deliver.Env != "" {
		d = "env " + c.cred.Deliver.Env
	}
	if c.injected() {
		d += " (placeholder; injected by berm's egress for " + strings.Join(c.cred.Deliver.Inject.Hosts, ",") + ")"
	}
	return d
}

// delivered is what the tool gets: the placeholder of an injected credential, else the value.
func (c *issued) delivered() []byte {
	if c.injected() {
		return c.placeholder
	}
	return c.value
}

func sourceName(s policy.CredentialSource) string {
	switch {
	case s.File != "":
		return "file"
	case s.Env != "":
		return "env"
	}
	return "exec"
}

// mintCredentials reads or mints each of the call's credentials, before the call begins: the
// values take themselves out of its command line before that is journalled. A failing source
// fails the call before its tool starts; the error names the credential, never its value.
// What was minted before a failure is returned too, to be revoked.
func (l *launch) mintCredentials() error {
	for _, c := range l.spec.Policy.Spec.Credentials {
		if f := c.Deliver.File; f != "" {
			d := filepath.Dir(f)
			if ws := l.spec.Workspace; d == ws || strings.HasPrefix(d, ws+"/") || strings.HasPrefix(ws, d+"/") || d == "/tmp" || strings.HasPrefix(d, "/tmp/") {
				return fmt.Errorf("credential %s: delivery file %s: its directory gets a tmpfs of its own, and it overlaps the workspace or /tmp", c.Name, f)
			}
		}
		if err := l.intendRevoke(c); err != nil {
			return fmt.Errorf("credential %s: %w", c.Name, err)
		}
		value, err := l.readSource(c)
		if err != nil {
			return fmt.Errorf("credential %s: %w", c.Name, err)
		}
		l.creds = append(l.creds, &issued{cred: c, value: value})
	}
	return nil
}

// scrubArgv is argv with the call's own secrets (any form) redacted, and the names found.
func (l *launch) scrubArgv(argv []string) ([]string, []secrets.Literal) {
	var lits []secrets.Literal
	for _, c := range l.creds {
		for _, f := range secrets.Forms(c.value) {
			lits = append(lits, secrets.Literal{Name: c.cred.Name, Form: f})
		}
	}
	if len(lits) == 0 {
		return argv, nil
	}
	out := make([]string, len(argv))
	var found []secrets.Literal
	for i, a := range argv {
		var f []secrets.Literal
		out[i], f = secrets.RedactString(a, lits)
		found = append(found, f...)
	}
	return out, found
}

// issueCredentials registers the minted credentials with the node (fingerprinted, live until
// the call's record is written) and hands them to the init's configuration: environment,
// secret files and their Landlock read rule. argvLeaks are those found in the call's command
// line.
func (l *launch) issueCredentials(reg *secrets.Registry, argvLeaks []secrets.Literal) error {
	if len(l.creds) == 0 {
		return nil
	}
	if reg == nil {
		return errors.New("credentials: this launcher has no secret registry")
	}
	env := append([]string(nil), l.env.init.Env...)
	byName := map[string]*issued{}
	for _, is := range l.creds {
		c := is.cred
		byName[c.Name] = is
		is.fp = reg.FP.Of(is.value)
		is.remove = reg.Add(secrets.Owner{CallKey: l.callKey, CallID: l.spec.CallID, Tenant: l.spec.Tenant, Name: c.Name, Fingerprint: is.fp}, is.value)
		if is.injected() {
			// The placeholder anywhere but its header to its hosts is an attempt to move the
			// secret: registered like one, it is refused in DNS names and redacted and
			// alerted on in the output and the trail.
			is.placeholder = inject.Placeholder(is.value)
			is.removePH = reg.Add(secrets.Owner{CallKey: l.callKey, CallID: l.spec.CallID, Tenant: l.spec.Tenant, Name: c.Name, Fingerprint: is.fp}, is.placeholder)
		}
		l.emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
			Name: c.Name, Action: event.CredentialIssued, Fingerprint: is.fp, Source: sourceName(c.Source), Delivery: is.delivery()}})
		if c.Deliver.Env != "" {
			// The broker's value is the one the tool sees: a caller's variable of the same
			// name goes (with two, getenv would return the first).
			env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, c.Deliver.Env+"=") })
			env = append(env, c.Deliver.Env+"="+string(is.delivered()))
			continue
		}
		l.env.init.Secrets = append(l.env.init.Secrets, sandboxinit.SecretFile{Path: c.Deliver.File, Data: is.delivered()})
		if l.env.init.Landlock != nil {
			rs := *l.env.init.Landlock
			rs.Paths = append(append([]landlock.PathRule(nil), rs.Paths...), landlock.PathRule{Path: c.Deliver.File, Access: landlock.ReadFile},
				landlock.PathRule{Path: filepath.Dir(c.Deliver.File), Access: landlock.ReadDir})
			l.env.init.Landlock = &rs
		}
	}
	for _, f := range argvLeaks {
		if is := byName[f.Name]; is != nil {
			is.leaks.Add(1)
			l.emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
				Name: f.Name, Action: event.CredentialLeaked, Fingerprint: is.fp, Delivery: is.delivery(), Result: "redacted", Where: "call argv", Encoding: f.Encoding}})
		}
	}
	env, err := l.startInjection(env)
	if err != nil {
		return err
	}
	l.env.init.Env = env
	return nil
}

// emit adds an event to the call's trail (none before the call began).
func (l *launch) emit(ev event.Event) {
	if l.call != nil {
		l.call.Emit(ev)
	}
}

// delivered records that the init took the call's configuration with its credentials.
func (l *launch) delivered(initPID int) {
	for _, c := range l.creds {
		l.call.Emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
			Name: c.cred.Name, Action: event.CredentialDelivered, Fingerprint: c.fp, Delivery: c.delivery()}})
		if c.cred.TTL > 0 {
			c.expiry = time.AfterFunc(c.cred.TTL, func() { l.expire(c, initPID) })
		}
	}
}

// expire ends a credential whose time is up while its call runs: its file goes from the call's
// tmpfs and its revoke runs (an environment variable cannot be taken back: revoke is what
// ends it).
func (l *launch) expire(c *issued, initPID int) {
	if f := c.cred.Deliver.File; f != "" {
		_ = os.Remove(fmt.Sprintf("/proc/%d/root%s", initPID, f))
	}
	l.revoke(c, "ttl")
}

// revokeCredentials runs at the call's end, whatever ended it: every credential is revoked.
// They stay in the node's registry until the record is written (forgetCredentials): the
// call's last events are scrubbed as they drain.
func (l *launch) revokeCredentials() []event.CredentialUse {
	var uses []event.CredentialUse
	for _, c := range l.creds {
		if c.expiry != nil {
			c.expiry.Stop()
		}
		l.revoke(c, "call end")
		c.mu.Lock()
		uses = append(uses, event.CredentialUse{Name: c.cred.Name, Fingerprint: c.fp, Delivery: c.delivery(), Revoked: c.revoked, Leaks: c.leaks.Load()})
		c.mu.Unlock()
	}
	return uses
}

// forgetCredentials takes the call's secrets out of the node's registry and berm's memory.
func (l *launch) forgetCredentials() {
	for _, c := range l.creds {
		if c.remove != nil {
			c.remove()
		}
		if c.removePH != nil {
			c.removePH()
		}
		clear(c.value)
	}
}

func (l *launch) revoke(c *issued, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.done = true
	result := "no revoke command"
	if len(c.cred.Revoke) > 0 {
		// The secret is on its stdin: revoking a token often needs the token itself.
		_, err := l.runCredentialCmd(c.cred, c.cred.Revoke, bytes.NewReader(c.value), "BERM_SECRET_FINGERPRINT="+c.fp)
		result = "ok"
		if err != nil {
			result = err.Error()
		}
		c.revoked = result
		// It ran (whatever it said): a launcher starting after a crash must not run it again.
		_ = l.pending.ran(c.cred.Name)
	}
	l.emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
		Name: c.cred.Name, Action: event.CredentialRevoked, Fingerprint: c.fp, Delivery: c.delivery(), Result: result, Where: why}})
}

func (l *launch) readSource(c policy.Credential) ([]byte, error) {
	var v []byte
	switch s := c.Source; {
	case s.File != "":
		f, err := os.Open(s.File)
		if err != nil {
			return nil, fmt.Errorf("source file: %w", err)
		}
		defer f.Close()
		if v, err = io.ReadAll(io.LimitReader(f, credentialMaxBytes+1)); err != nil {
			return nil, fmt.Errorf("source file %s: %w", s.File, err)
		}
	case s.Env != "":
		e, ok := os.LookupEnv(s.Env)
		if !ok {
			return nil, fmt.Errorf("source env %s: not set in berm's environment", s.Env)
		}
		v = []byte(e)
	default:
		var err error
		if v, err = l.runCredentialCmd(c, s.Exec, nil); err != nil {
			return nil, fmt.Errorf("source exec %s: %w", s.Exec[0], err)
		}
	}
	if len(v) > credentialMaxBytes {
		return nil, fmt.Errorf("source gave more than %d bytes", credentialMaxBytes)
	}
	// One trailing newline is the file's or the command's, not the secret's.
	v = bytes.TrimSuffix(bytes.TrimSuffix(v, []byte("\n")), []byte("\r"))
	if len(v) == 0 {
		return nil, errors.New("source gave an empty secret")
	}
	return v, nil
}

// runCredentialCmd runs a minting or revoking command outside the sandbox, bounded in time and
// output. Its stdout is returned; its stderr is dropped, never recorded: it may hold the secret.
func (l *launch) runCredentialCmd(c policy.Credential, argv []string, stdin io.Reader, extra ...string) ([]byte, error) {
	ttl := c.TTL
	if ttl == 0 {
		ttl = l.spec.Limits.WallTime
	}
	env := append([]string{"BERM_CALL_ID=" + l.spec.CallID, "BERM_TENANT=" + l.spec.Tenant, "BERM_TOOL=" + l.spec.Tool,
		fmt.Sprintf("BERM_TTL=%d", int64(ttl.Seconds()))}, extra...)
	return credentialCmd(argv, stdin, c.RunAs, env)
}

// credentialCmd runs argv with the BERM_ variables in bermEnv (a nil stdin reads as empty),
// bounded as runCredentialCmd says: as root with berm's environment too, or as user runAs with
// only PATH besides (berm's environment may hold env sources' secrets).
func credentialCmd(argv []string, stdin io.Reader, runAs string, bermEnv []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), credentialCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), bermEnv...)
	if runAs != "" {
		cred, home, err := lookupRunAs(runAs)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "USER=" + runAs, "LOGNAME=" + runAs}, bermEnv...)
		cmd.Dir = "/"
	}
	cmd.Stdin = stdin
	var out limitedBuffer
	cmd.Stdout = &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("did not finish within %s", credentialCmdTimeout)
	case out.over:
		return nil, fmt.Errorf("wrote more than %d bytes", credentialMaxBytes)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%s (its stderr is not shown: it may hold the secret)", ee.ProcessState.String())
		}
		return nil, err
	}
	return out.Bytes(), nil
}

// lookupRunAs is a node user's ids, without supplementary groups: a command dropped to it
// keeps nothing of root's.
func lookupRunAs(name string) (*syscall.Credential, string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, "", fmt.Errorf("runAs %s: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		return nil, "", fmt.Errorf("runAs %s: uid %s gid %s: not an unprivileged user", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, u.HomeDir, nil
}

type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > credentialMaxBytes {
		b.over = true
		return 0, errors.New("too much output")
	}
	return b.Buffer.Write(p)
}

// redactor is the filter the call's output stream goes through to the caller: its credentials'
// forms and the policy's patterns redacted, each first find per credential, form and stream
// recorded as a leak with a credential alert.
func (l *launch) redactor(stream string, w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	var own []secrets.Literal
	byName := map[string]*issued{}
	for _, c := range l.creds {
		byName[c.cred.Name] = c
		for _, f := range secrets.Forms(c.value) {
			own = append(own, secrets.Literal{Name: c.cred.Name, Form: f})
		}
		if c.placeholder != nil {
			for _, f := range secrets.Forms(c.placeholder) {
				own = append(own, secrets.Literal{Name: c.cred.Name, Form: f})
			}
		}
	}
	pats := l.env.redact
	reg := l.call.Secrets()
	if len(own) == 0 && len(pats) == 0 && reg == nil {
		return w
	}
	seen := map[string]bool{}
	r := secrets.NewRedactor(w, own, pats, func(m secrets.Match) {
		key := m.Name + "/" + m.Encoding
		if o := m.Owner; o != nil {
			key = o.CallKey + "/" + key
			if !seen[key] {
				seen[key] = true
				l.call.Emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
					Name: m.Name, Action: event.CredentialLeaked, Fingerprint: o.Fingerprint, Result: "redacted", Where: stream, Encoding: m.Encoding,
					OtherCall: o.CallKey, OtherTenant: o.Tenant}})
				l.call.Emit(event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "credential-cross-call", Title: "A credential of another call showed in this call",
					Severity: "critical", Surface: event.SurfaceCredential,
					Output: fmt.Sprintf("credential %s (fingerprint %s) of call %s (id %s, tenant %s) showed in this call's %s (%s), call %s (tenant %s): redacted",
						m.Name, o.Fingerprint, o.CallKey, o.CallID, o.Tenant, stream, m.Encoding, l.callKey, l.spec.Tenant)}})
			}
			return
		}
		if c := byName[m.Name]; m.Secret && c != nil {
			c.leaks.Add(1)
			if !seen[key] {
				seen[key] = true
				l.call.Emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{
					Name: m.Name, Action: event.CredentialLeaked, Fingerprint: c.fp, Delivery: c.delivery(), Result: "redacted", Where: stream, Encoding: m.Encoding}})
				l.call.Emit(event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "credential-output-leak", Title: "A brokered credential showed in the call's output",
					Severity: "high", Surface: event.SurfaceCredential,
					Output: fmt.Sprintf("credential %s (fingerprint %s) in %s, %s encoding: redacted in what the caller received", m.Name, c.fp, stream, m.Encoding)}})
			}
			return
		}
		if !seen[key] {
			seen[key] = true
			l.call.Emit(event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "output-redact", Title: "Output matched a redaction pattern",
				Severity: "medium", Surface: event.SurfaceCredential,
				Output: fmt.Sprintf("pattern %s matched in %s: redacted in what the caller received", m.Name, stream)}})
		}
	})
	if reg != nil {
		// The neighbours' live secrets, looked up again whenever the node's set changes.
		var gen atomic.Uint64
		gen.Store(^uint64(0))
		r.Refresh = func(r *secrets.Redactor) {
			if g := reg.Gen(); g != gen.Load() {
				gen.Store(g)
				r.SetLiterals(append(append([]secrets.Literal(nil), own...), reg.Others(l.callKey)...))
			}
		}
	}
	return r
}
