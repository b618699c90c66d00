package sandboxer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// A credential's revoke must run even when its launcher does not live to the call's end
// (bermd or an embedded `berm run` killed mid-call). While a call runs, what its revokes need
// is in a root-only file of the state directory, locked by the launcher: the call's ids, each
// credential's name, fingerprint and revoke command, never a value. The lock goes with the
// launcher's process; a launcher starting on the node (NewAgent) replays the files nobody
// holds, and journals each revoke with its result, "after restart", in the call's trail.
//
// A replayed revoke cannot have the secret on its stdin (it was never written down): it gets
// an empty stdin and BERM_REVOKE_AFTER_RESTART=1, and must revoke by BERM_SECRET_FINGERPRINT
// and the call's ids (a broker keeps what it minted per call).
//
// The intent comes first: a credential's entry (call id, tenant, tool, name, revoke command)
// is written, locked and synced before its minting command starts, so a launcher killed at
// any point after the mint began leaves a revoke to replay. Its fingerprint and the call's key
// are filled in once the value is minted and the call has begun. A launcher killed in between
// (the mint running, or its output not yet fingerprinted) leaves an entry without them: the
// replayed revoke then gets BERM_SECRET_FINGERPRINT empty and must revoke what it minted for
// BERM_CALL_ID (and tenant, tool); nothing goes to a trail, since the call never began (the
// replay is in the launcher's log). Such a revoke may come for a mint that never finished:
// a broker's revoke must take "nothing minted for this call" as done.

const pendingRevokesDir = "credentials/revokes"

type pendingRevoke struct {
	Name string `json:"name"`
	// Fingerprint is empty while the credential is being minted (see above).
	Fingerprint string   `json:"fingerprint"`
	Revoke      []string `json:"revoke"`
	RunAs       string   `json:"run_as,omitempty"`
	TTLSeconds  int64    `json:"ttl_seconds"` // BERM_TTL, as the mint had it
	// Expires is when the credential's time was up (its ttl, else the call's wall-time cap):
	// a replay after it still revokes, the broker may have let it lapse already.
	Expires time.Time `json:"expires"`
}

type pendingRevokeFile struct {
	CallKey string          `json:"call_key"` // empty until the call began
	CallID  string          `json:"call_id"`
	Tenant  string          `json:"tenant"`
	Tool    string          `json:"tool"`
	Creds   []pendingRevoke `json:"credentials"`
}

// pendingRevokes is the call's file, open and locked by its launcher until every revoke ran.
type pendingRevokes struct {
	mu   sync.Mutex // a ttl's revoke runs on its timer, the others at the call's end
	f    *os.File
	path string
	rec  pendingRevokeFile
}

// intendRevoke puts credential c's revoke in the call's file before its source is read (its
// minting command runs): a credential whose revoke cannot be kept is not minted, and the call
// does not start.
func (l *launch) intendRevoke(c policy.Credential) error {
	if len(c.Revoke) == 0 {
		return nil
	}
	if l.stateDir == "" {
		return errors.New("pending revokes: this launcher has no state directory")
	}
	if l.pending == nil {
		pr, err := openPendingRevokes(l.stateDir, pendingRevokeFile{CallID: l.spec.CallID, Tenant: l.spec.Tenant, Tool: l.spec.Tool})
		if err != nil {
			return err
		}
		l.pending = pr
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = l.spec.Limits.WallTime
	}
	p := l.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec.Creds = append(p.rec.Creds, pendingRevoke{Name: c.Name, Revoke: c.Revoke, RunAs: c.RunAs,
		TTLSeconds: int64(ttl.Seconds()), Expires: time.Now().Add(ttl)})
	return p.write()
}

// openPendingRevokes makes a call's file, named before the call has its key, and locks it.
func openPendingRevokes(stateDir string, rf pendingRevokeFile) (*pendingRevokes, error) {
	dir := filepath.Join(stateDir, pendingRevokesDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pending revokes: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pending revokes: %w", err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	p := filepath.Join(dir, "call-"+hex.EncodeToString(rnd[:])+".json")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pending revokes: %w", err)
	}
	// Locked before anything is in it: a launcher starting now sees a held file, not a
	// crashed call's.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		os.Remove(p)
		return nil, fmt.Errorf("pending revokes: lock %s: %w", p, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return &pendingRevokes{f: f, path: p, rec: rf}, nil
}

// persistRevokes fills in the call's key and each minted credential's fingerprint, once the
// call began and its credentials were issued.
func (l *launch) persistRevokes() error {
	p := l.pending
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	p.rec.CallKey = l.callKey
	for i := range p.rec.Creds {
		for _, c := range l.creds {
			if c.cred.Name == p.rec.Creds[i].Name {
				p.rec.Creds[i].Fingerprint = c.fp
			}
		}
	}
	return p.write()
}

// write puts the record in place of the last: written over it first, then cut to its length.
// A launcher killed in between leaves the new record followed by the old one's tail, which
// the replay (it reads the first JSON value) ignores; truncating first would leave an empty
// file, and its revokes lost.
func (p *pendingRevokes) write() error {
	data, err := json.Marshal(p.rec)
	if err != nil {
		return err
	}
	if _, err := p.f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("pending revokes: %w", err)
	}
	if err := p.f.Truncate(int64(len(data))); err != nil {
		return fmt.Errorf("pending revokes: %w", err)
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("pending revokes: %w", err)
	}
	return nil
}

// ran takes a revoked credential out of the file, and the file away once none is left.
func (p *pendingRevokes) ran(name string) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	keep := p.rec.Creds[:0]
	for _, c := range p.rec.Creds {
		if c.Name != name {
			keep = append(keep, c)
		}
	}
	p.rec.Creds = keep
	if len(keep) > 0 {
		if err := p.write(); err != nil {
			// Better no file than one that would run this revoke a second time.
			p.closeLocked()
			return err
		}
		return nil
	}
	p.closeLocked()
	return nil
}

// close removes the file (while it still holds the lock: nobody replays it) and releases it.
func (p *pendingRevokes) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

func (p *pendingRevokes) closeLocked() {
	if p.f == nil {
		return
	}
	os.Remove(p.path)
	p.f.Close()
	p.f = nil
}

// replayRevokes runs the revokes of calls whose launcher died, once each: a file whose lock
// is held belongs to a running call; one that was removed while we waited for its lock was
// finished by its launcher or by another replayer.
func replayRevokes(stateDir string, j lateJournal, log *slog.Logger) {
	dir := filepath.Join(stateDir, pendingRevokesDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Error("pending credential revokes", "err", err)
		}
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		if err := replayRevokeFile(j, filepath.Join(dir, e.Name()), log); err != nil {
			log.Error("pending credential revokes", "file", e.Name(), "err", err)
		}
	}
}

// lateJournal records events of a call that already lost its launcher (agent.Agent).
type lateJournal interface {
	AppendAfterRestart(start event.CallStart, evs []event.Event) error
}

func replayRevokeFile(j lateJournal, p string, log *slog.Logger) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if err == unix.EWOULDBLOCK {
			return nil // its launcher is alive
		}
		return fmt.Errorf("lock: %w", err)
	}
	var held, now unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(p, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
		return nil // removed (and perhaps made again) while we waited: not ours
	}
	var rec pendingRevokeFile
	data, err := os.ReadFile(p)
	if err == nil {
		// the first value: what follows it is an older record's tail (write)
		err = json.NewDecoder(bytes.NewReader(data)).Decode(&rec)
	}
	if err != nil || rec.CallID == "" {
		// Written by a launcher that died before the file was whole: nothing in it to run
		// (an entry is written before its credential's mint starts).
		log.Error("pending credential revokes: unreadable, removed", "file", p, "err", err)
		return os.Remove(p)
	}
	pr := &pendingRevokes{f: f, path: p, rec: rec}
	var evs []event.Event
	for _, c := range append([]pendingRevoke(nil), rec.Creds...) {
		env := []string{"BERM_CALL_ID=" + rec.CallID, "BERM_TENANT=" + rec.Tenant, "BERM_TOOL=" + rec.Tool,
			fmt.Sprintf("BERM_TTL=%d", c.TTLSeconds), "BERM_SECRET_FINGERPRINT=" + c.Fingerprint, "BERM_REVOKE_AFTER_RESTART=1"}
		result := "ok"
		if _, err := credentialCmd(c.Revoke, nil, c.RunAs, env); err != nil {
			result = err.Error()
		}
		log.Info("credential revoked after a restart", "call_key", rec.CallKey, "call", rec.CallID, "tenant", rec.Tenant, "credential", c.Name, "fingerprint", c.Fingerprint, "result", result)
		evs = append(evs, event.Event{Time: time.Now(), Kind: event.KindCredential, Credential: &event.Credential{
			Name: c.Name, Action: event.CredentialRevoked, Fingerprint: c.Fingerprint, Result: result, Where: "after restart"}})
		// Out of the file at once: a replayer that dies now does not run it a second time.
		if err := pr.ran(c.Name); err != nil {
			return err
		}
	}
	if len(evs) == 0 || rec.CallKey == "" {
		// No call began (killed while minting): the launcher's log has the revokes.
		pr.close()
		return nil
	}
	if err := j.AppendAfterRestart(event.CallStart{CallKey: rec.CallKey, CallID: rec.CallID, Tool: rec.Tool, Tenant: rec.Tenant}, evs); err != nil {
		return err
	}
	pr.close()
	return nil
}
