package rules

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// The benchmark corpus is recorded from real calls: BERM_RECORD_CORPUS=1 go test -run
// TestRecordCorpus ./rules/ (as root) runs a mixed developer workload in berm run and stores
// the calls' events (alerts left out) in testdata/corpus.json.gz.

const corpusPath = "testdata/corpus.json.gz"

var corpusWorkload = [][]string{
	sh("cd /tmp && git init -q repo && cd repo && for i in 1 2 3 4 5 6 7 8; do echo line$i > f$i.txt; done && git add . && git -c user.email=a@b -c user.name=a commit -qm init && git log --oneline >/dev/null && git status >/dev/null"),
	{py, "-c", "import json, os, re, subprocess, tempfile, hashlib\n" +
		"d = tempfile.mkdtemp()\n" +
		"for i in range(200):\n" +
		"    p = os.path.join(d, 'f%d.json' % i)\n" +
		"    open(p, 'w').write(json.dumps({'i': i}))\n" +
		"    json.load(open(p))\n" +
		"for i in range(20):\n" +
		"    subprocess.run(['true'])\n" +
		"for name in os.listdir(d):\n" +
		"    os.unlink(os.path.join(d, name))\n"},
	sh("for f in /etc/*.conf; do head -c 100 $f >/dev/null 2>&1; done; ls -la /usr/bin >/dev/null; find /usr/share/doc -maxdepth 2 -name '*.gz' | head -50 | xargs -r zcat 2>/dev/null | wc -l"),
	sh("mkdir -p /tmp/build && cd /tmp/build && for i in $(seq 1 60); do echo \"int f$i(void){return $i;}\" > f$i.c; cp f$i.c g$i.c; mv g$i.c h$i.c; done; tar czf /tmp/a.tgz . && rm -rf /tmp/build && tar tzf /tmp/a.tgz | wc -l"),
	{py, "-c", "import socket\nfor port in (80, 443, 8080, 5432):\n    s = socket.socket()\n    s.settimeout(0.2)\n    try:\n        s.connect(('127.0.0.1', port))\n    except Exception:\n        pass\n    s.close()\n"},
	sh("cat /etc/passwd /etc/group >/dev/null; id; uname -a; env | sort | head -5; date; sleep 0.1; ps >/dev/null 2>&1; true"),
}

func TestRecordCorpus(t *testing.T) {
	if os.Getenv("BERM_RECORD_CORPUS") == "" {
		t.Skip("set BERM_RECORD_CORPUS=1 (as root) to record testdata/corpus.json.gz from real calls")
	}
	bin := buildBerm(t)
	stateDir, err := os.MkdirTemp("/var/tmp", "berm-rules-corpus-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stateDir)
	var all []event.Event
	for i, cmd := range corpusWorkload {
		for _, ev := range runCall(t, bin, stateDir, fmt.Sprintf("corpus-%d", i), []string{"--no-rules"}, cmd) {
			if ev.Kind != event.KindAlert {
				all = append(all, ev)
			}
		}
	}
	f, err := os.Create(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if err := json.NewEncoder(zw).Encode(all); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d events from %d calls", len(all), len(corpusWorkload))
}

func loadCorpus(tb testing.TB) []event.Event {
	tb.Helper()
	f, err := os.Open(corpusPath)
	if err != nil {
		tb.Fatalf("benchmark corpus: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var evs []event.Event
	if err := json.NewDecoder(zr).Decode(&evs); err != nil {
		tb.Fatal(err)
	}
	return evs
}
