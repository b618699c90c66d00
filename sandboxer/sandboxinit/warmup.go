package sandboxinit

import (
	"encoding/json"
	"io"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
)

// warmUp runs, in a warm init waiting for its call, the decoding and encoding the call will
// need, on a sample call: a fresh process's first use of a type builds its codec by reflection
// (a few hundred microseconds for a Config, measured), which would otherwise be on the call's
// way. Nothing of the sample is kept.
func warmUp() {
	sample := Message{Call: &Config{
		Argv: []string{"a"}, Env: []string{"A=b"}, Workspace: "/w", Hostname: "h", TmpBytes: 1, TmpInodes: 1,
		HostUID: 1, HostGID: 1, NewNet: true, TmpNoExec: true, MemfdNoExec: true, HostRoot: true,
		Root: RootPlan{Binds: []Bind{{Path: "/b", Writable: true, Link: "l"}}, Devices: []string{"/dev/null"}, Masked: []string{"/w/m"}},
		Landlock: &landlock.Ruleset{HandledFS: 1, HandledNet: 1, Scoped: 1,
			Paths: []landlock.PathRule{{Path: "/p", Access: 1}}, Ports: []landlock.PortRule{{Port: 1, Access: 1}}},
		Seccomp:  Program{{Code: 6, K: 1}},
		Terminal: &Terminal{Stdout: true, Stderr: true, Name: "/dev/pts/0"},
	}}
	data, err := json.Marshal(sample)
	if err != nil {
		return
	}
	var m Message
	_ = json.Unmarshal(data, &m)
	// The tool's stage's configuration, and the status the init reports at the end.
	_, _ = encodeStage(toolConfig{Argv: []string{"a"}, Seccomp: Program{unix.SockFilter{}}}, setIDFilter())
	_ = json.NewEncoder(io.Discard).Encode(Status{Started: true, Exited: true})
}
