package sandboxer_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// What well-behaved programs do on their normal path is not refused and raises nothing under
// the strict policy with the shipped rules: glibc's clone3 (answered ENOSYS: it falls back to
// clone), configuration files a program looks for and the host does not have (~/.curlrc),
// threads, subprocesses, a compiler, an interpreter's imports. A denial or an alert here is
// noise on-call learns to ignore; each is listed with what raised it.
func TestBenignCorpusRunsWithoutDenialsOrViolations(t *testing.T) {
	bermbin.RequireRoot(t)
	type tool struct {
		name, prog, script string
	}
	var tools []tool
	for _, c := range []tool{
		// The strict policy opens no port, loopback's included, and refuses a unix socket
		// bound to a path (a special file): the server is the call's own, on an abstract unix
		// socket (its network namespace's own).
		{"curl against a local server", "curl",
			`cat > serve.py <<'X'
import http.server, socketserver, sys
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer): pass
class H(http.server.SimpleHTTPRequestHandler):
    def address_string(self): return "local"
S("\0" + sys.argv[1], H).serve_forever()
X
python3 serve.py berm-benign & ok=1
for i in $(seq 100); do if curl -fsS --abstract-unix-socket berm-benign -o got http://localhost/serve.py 2>/dev/null; then ok=0; break; fi; sleep 0.1; done
kill $!; wait; test $ok = 0 && test -s got`},
		{"git init and commit", "git",
			`git init -q repo && cd repo && git config user.email t@example.com && git config user.name t && echo a > a && git add a && git commit -qm first && git log --oneline | grep -c first`},
		{"python with threads and a subprocess", "python3",
			`python3 -c 'import threading, subprocess, concurrent.futures as cf
with cf.ThreadPoolExecutor(4) as ex: print(sum(ex.map(lambda x: x * x, range(100))))
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
print(subprocess.run(["ls", "-a"], capture_output=True, check=True).returncode)'`},
		{"python imports", "python3",
			`python3 -c 'import json, ssl, sqlite3, email, http.client, urllib.request, xml.etree.ElementTree, decimal, asyncio, multiprocessing, locale, socket, hashlib, zlib; locale.setlocale(locale.LC_ALL, ""); print(socket.gethostname() != "")'`},
		{"node", "node",
			`node -e 'const fs = require("fs"); fs.writeFileSync("n.txt", "x"); require("child_process").execFileSync("true"); console.log(require("os").cpus().length > 0)'`},
		{"cc compiling a file", "cc",
			`printf '#include <stdio.h>\nint main(void){puts("hi");return 0;}\n' > hello.c && cc -O2 -Wall -o hello hello.c && test -s hello`},
	} {
		if _, err := exec.LookPath(c.prog); err != nil {
			t.Logf("%s: %s is not installed here", c.name, c.prog)
			continue
		}
		tools = append(tools, c)
	}
	state := t.TempDir()
	for i, c := range tools {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("benign-corpus-%d", i)
			r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--daemon", "never", "--call-id", id, "--tool", "benign",
				"--workspace", bermbin.Workspace(t), "--", "sh", "-c", c.script)
			if r.Exit != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
			}
			tl := bermbin.Timeline(t, state, id)
			for _, e := range tl.Events {
				switch {
				case e.Denial != nil:
					t.Errorf("denial: %s %s (rule %s, surface %s)", e.Denial.Layer, e.Denial.Object, e.Denial.Rule, e.Denial.Surface)
				case e.Alert != nil:
					t.Errorf("alert: %s %s", e.Alert.RuleID, e.Alert.Title)
				}
			}
			var states []string
			for _, s := range tl.Call.Record.Surfaces {
				states = append(states, s.Surface+"="+s.State)
				if s.Violated {
					t.Errorf("surface %s violated (%d)", s.Surface, s.Violations)
				}
				if s.State == event.StateDegraded {
					t.Errorf("surface %s degraded", s.Surface)
				}
			}
			t.Logf("surfaces: %s", strings.Join(states, " "))
		})
	}
}
