package secrets

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/policy"
)

// benchOutput is a tool's ordinary output: log-like lines, nothing to redact.
var benchOutput = func() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "2026-11-25T10:00:%02d INFO compiled pkg/%d/file_%d.go in 12ms (cache miss, 3 deps)\n", i%60, i, i*7)
	}
	return b.Bytes()
}()

func strictPatterns() []Pattern {
	var pats []Pattern
	for _, p := range policy.Strict().Spec.Output.Redact {
		sp := Pattern{Name: p.Name, Regex: regexp.MustCompile(p.Regex)}
		if p.End != "" {
			sp.End = regexp.MustCompile(p.End)
		}
		pats = append(pats, sp)
	}
	return pats
}

// BenchmarkOutput: 1 MiB of ordinary output in 32 KiB reads (the launcher's), passed through
// as is (the peer) and through the redactor with one delivered secret and the strict
// policy's patterns.
func BenchmarkOutput(b *testing.B) {
	var lits []Literal
	for _, f := range Forms([]byte(`tok/"q&z+0123456789abcdef`)) {
		lits = append(lits, Literal{Name: "db", Form: f})
	}
	for _, bc := range []struct {
		name string
		w    func() io.Writer
	}{
		{"passthrough", func() io.Writer { return io.Discard }},
		{"secret", func() io.Writer { return NewRedactor(io.Discard, lits, nil, nil) }},
		{"secret+strict-patterns", func() io.Writer { return NewRedactor(io.Discard, lits, strictPatterns(), nil) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(benchOutput)))
			for range b.N {
				w := bc.w()
				for off := 0; off < len(benchOutput); off += 32 << 10 {
					w.Write(benchOutput[off:min(off+32<<10, len(benchOutput))])
				}
				if c, ok := w.(io.Closer); ok {
					c.Close()
				}
			}
		})
	}
}

// BenchmarkScrub: a path of the trail checked against the node's live secrets.
func BenchmarkScrub(b *testing.B) {
	fp, _ := LoadKey(b.TempDir())
	path := "/usr/lib/python3/dist-packages/some/module/__pycache__/file.cpython-311.pyc"
	for _, n := range []int{0, 1, 100} {
		r := NewRegistry(fp)
		for i := range n {
			r.Add(Owner{CallKey: fmt.Sprint(i), Name: "s"}, []byte(strings.Repeat(fmt.Sprint(i), 3)+"-secret-value-0123456789"))
		}
		b.Run(fmt.Sprintf("live-%d", n), func(b *testing.B) {
			for range b.N {
				r.Scrub(path)
			}
		})
	}
}
