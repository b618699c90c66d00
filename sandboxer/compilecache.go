package sandboxer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// policyCompiles keeps the policies compiled for calls, for the next call with the same
// policy, workspace, kernel and host mount table. A compile also reads the host's file
// system (every granted path resolved through its symlinks, the directories a deny carves),
// and what it read may have changed since: an entry is used only after every fact its compile
// read is read again and found as it was (policy.FSReads.Unchanged), so a call never runs
// under another state's resolution. Checking the facts costs one lstat per path the compile
// looked at (each once, however many grants walk it) and a readlink per symlink; compiling
// again costs the resolutions, the seccomp program, the root plan and the hash: a warm
// launch's largest share of its compile.
var policyCompiles = &compileCache{max: 64}

type compileCache struct {
	mu      sync.Mutex
	max     int
	entries map[[sha256.Size]byte]*compiledPolicy
	// hits and misses count the compiles reused and made (tests).
	hits, misses int
}

// compiledPolicy is the part of a call's environment that depends on its policy, workspace,
// kernel and host, not on the call itself. Shared by the calls that reuse it: read only.
type compiledPolicy struct {
	compiled *policy.Compiled
	hash     string
	plan     sandboxinit.RootPlan
	// roots are the judge's: the root plan's binds and their canonical paths.
	roots []string
	reads *policy.FSReads
}

// compile compiles p for a call in workspace under Landlock ABI abi, or reuses the compile of
// an earlier call whose every input is the same.
func (cc *compileCache) compile(p *policy.Policy, workspace string, abi int) (*compiledPolicy, error) {
	mounts, err := hostMounts.current()
	if err != nil {
		// The compiler reads the table itself: nothing here to key on.
		return compilePolicy(p, workspace, abi, "", "")
	}
	key, ok := compileKey(p, workspace, abi, mounts)
	if ok {
		cc.mu.Lock()
		e := cc.entries[key]
		cc.mu.Unlock()
		if e != nil && e.reads.Unchanged() {
			cc.mu.Lock()
			cc.hits++
			cc.mu.Unlock()
			return e, nil
		}
	}
	e, err := compilePolicy(p, workspace, abi, sandboxMounts(mounts, workspace), mounts)
	if err != nil {
		return nil, err // not kept: the next call compiles again
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.misses++
	if ok {
		if cc.entries == nil || len(cc.entries) >= cc.max {
			cc.entries = map[[sha256.Size]byte]*compiledPolicy{}
		}
		cc.entries[key] = e
	}
	return e, nil
}

// compilePolicy compiles p, with every read of the file system recorded. mountinfo is the
// call's mount table (empty: the compiler reads its own), mounts the host's.
func compilePolicy(p *policy.Policy, workspace string, abi int, mountinfo, mounts string) (*compiledPolicy, error) {
	reads := &policy.FSReads{}
	c, err := p.Compile(policy.CompileEnv{
		Workspace: workspace, Tmp: "/tmp", LandlockABI: abi, MountInfo: mountinfo, Reads: reads,
	})
	if err != nil {
		return nil, err
	}
	if mounts == "" {
		mounts, _ = hostMounts.current()
	}
	e := &compiledPolicy{compiled: c, hash: c.Hash(), reads: reads}
	e.plan = planRoot(p, c, workspace, reads, mounts)
	for _, b := range e.plan.Binds {
		e.roots = append(e.roots, b.Path)
		if canon, err := reads.EvalSymlinks(b.Path); err == nil && canon != b.Path {
			e.roots = append(e.roots, canon)
		}
	}
	return e, nil
}

// compileKey digests every input of a compile but the file system's facts: the policy (all of
// it, as the compiler reads it), the workspace, the ABI and the host's mount table. false when
// the policy cannot be encoded (never cached).
func compileKey(p *policy.Policy, workspace string, abi int, mounts string) ([sha256.Size]byte, bool) {
	pol, err := json.Marshal(p)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	h := sha256.New()
	for _, part := range []string{string(pol), workspace, mounts} {
		_ = binary.Write(h, binary.LittleEndian, uint64(len(part)))
		h.Write([]byte(part))
	}
	_ = binary.Write(h, binary.LittleEndian, int64(abi))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key, true
}
