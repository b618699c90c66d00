package agent

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

// An exec's environment (struct berm_exec_env) arrives just before its exec record, from the
// same task. It is held by thread until that exec event, scanned there for other calls' live
// secrets and dropped: an environment is never an event, never journalled or shipped, because
// its values are often credentials. The exec event keeps only its length and whether the
// kernel cut it (EnvLen, EnvTruncated: past BERM_ENV_MAX - 1 bytes nothing was scanned).

// errExecEnvNotAnEvent: the agent takes exec_env records out of a call's batch before decoding;
// one that reaches the decoder anyway is never turned into an event that could be recorded.
var errExecEnvNotAnEvent = errors.New("exec environment records are scanned by the agent, never decoded into events")

var execEnvSize = unsafe.Sizeof(bpf.WireBermExecEnv{})

func init() {
	wire.RegisterVariable(bpf.WireBermOpBERM_OP_EXEC_ENV, execEnvSize+bpf.BermEnvMax-1,
		func(*bpf.WireBermExecEnv, []byte, *event.Event) error { return errExecEnvNotAnEvent })
}

// maxHeldEnvs bounds the environments a call holds for exec records not yet seen: normally
// one per CPU at most (each is followed by its exec at once); more means exec records were
// lost (counted as drops), and the oldest environments go unscanned with them.
const maxHeldEnvs = 64

type heldEnv struct {
	b    []byte
	full uint32 // the environment's whole length; 0 when unknown (cut deeper than counted)
	cut  bool
}

// isExecEnv says whether raw is an exec_env record.
func isExecEnv(raw []byte) bool {
	h, ok := wire.Header(raw)
	return ok && h.Op == uint16(bpf.WireBermOpBERM_OP_EXEC_ENV)
}

// holdEnv keeps an exec_env record's environment for the exec record that follows it.
func (c *Call) holdEnv(raw []byte) error {
	h, _ := wire.Header(raw)
	size := uintptr(h.Size)
	if size < execEnvSize || size > execEnvSize+bpf.BermEnvMax-1 || uintptr(len(raw)) < size {
		return fmt.Errorf("exec environment record: header says %d bytes, record has %d", h.Size, len(raw))
	}
	e := (*bpf.WireBermExecEnv)(unsafe.Pointer(&raw[0]))
	t := wire.NewTail(raw[execEnvSize:size])
	s := t.Next(e.Env)
	if err := t.Err(); err != nil {
		return fmt.Errorf("exec environment record: %w", err)
	}
	if c.envs == nil {
		c.envs = map[uint32]heldEnv{}
	}
	if _, ok := c.envs[h.Tid]; !ok && len(c.envs) >= maxHeldEnvs {
		for tid := range c.envs {
			delete(c.envs, tid)
			break
		}
	}
	c.envs[h.Tid] = heldEnv{b: []byte(s.S), full: s.Full, cut: s.Truncated}
	return nil
}

// scanEnv takes the environment held for the exec event ev, records its length and cut on the
// exec, and returns the live secrets of other calls it holds. The call's own secrets are
// there by design (delivery by env, inherited by every child): not a leak.
func (a *Agent) scanEnv(c *Call, ev *event.Event) []secrets.Hit {
	env, ok := c.envs[ev.TID]
	if !ok {
		return nil
	}
	delete(c.envs, ev.TID)
	ev.Exec.EnvLen, ev.Exec.EnvTruncated = env.full, env.cut
	if !a.secrets.Live() {
		return nil
	}
	if env.cut {
		a.m.envScansCut.Inc()
	}
	_, hits := a.secrets.Scrub(string(env.b))
	others := hits[:0]
	for _, h := range hits {
		if h.CallKey != c.Start.CallKey {
			others = append(others, h)
		}
	}
	return others
}
