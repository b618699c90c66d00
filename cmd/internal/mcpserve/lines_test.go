package mcpserve

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/policy"
)

// A line past the bound is read through, reported once, and the next line is read whole.
func TestLineReaderDropsAnOverlongLineAndGoesOn(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 300000) + "\n\nnext\nlast-without-newline"
	lr := newLineReader(strings.NewReader(in), 1000)
	var got []string
	for {
		line, err := lr.next()
		if errors.Is(err, errTooLarge) {
			got = append(got, "TOO LARGE")
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	if strings.Join(got, "|") != "short|TOO LARGE|next|last-without-newline" {
		t.Errorf("lines: %q", got)
	}
}

func TestParseEnvelopeAnswersWhatIsNotJSONRPC(t *testing.T) {
	for _, c := range []struct {
		line string
		code int
	}{
		{`garbage{`, codeParseError},
		{`[1,2]`, codeInvalidRequest},
		{`{"id":1,"method":"x"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, 0},
	} {
		_, rerr := parseEnvelope([]byte(c.line))
		code := 0
		if rerr != nil {
			var m struct{ Error struct{ Code int } }
			if err := json.Unmarshal(rerr, &m); err != nil {
				t.Fatal(err)
			}
			code = m.Error.Code
		}
		if code != c.code {
			t.Errorf("%s: code %d, want %d", c.line, code, c.code)
		}
	}
}

// The request id berm puts in _meta replaces whatever the client put there.
func TestWithRequestIDReplacesAClientsClaim(t *testing.T) {
	line := []byte(`{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"run","_meta":{"dev.berm/request_id":"forged","other":1}}}`)
	env, rerr := parseEnvelope(line)
	if rerr != nil {
		t.Fatal(string(rerr))
	}
	var m struct {
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(withRequestID(env, line), &m); err != nil {
		t.Fatal(err)
	}
	if m.Params.Meta[metaRequestID] != `"a\"b"` || m.Params.Meta["other"] != 1.0 {
		t.Errorf("_meta: %v", m.Params.Meta)
	}
}

func TestRedactArgsHidesSecretsAndCaps(t *testing.T) {
	got := redactArgs(json.RawMessage(`{"path":"/etc/x","API_KEY":"sk-1","nested":{"password":"p","list":[{"token":"t"}]}}`))
	if strings.Contains(got, "sk-1") || strings.Contains(got, `"p"`) || strings.Contains(got, `"t"`) || !strings.Contains(got, "/etc/x") {
		t.Errorf("redacted: %s", got)
	}
	if long := redactArgs(json.RawMessage(`{"a":"` + strings.Repeat("y", 5000) + `"}`)); len(long) > maxArgs+100 {
		t.Errorf("not capped: %d bytes", len(long))
	}
}

// The server's policy is the strict one with read and exec of its command added, and still
// compiles; nothing else is loosened.
func TestServerPolicyAddsOnlyTheServersOwnPaths(t *testing.T) {
	dir := t.TempDir()
	p, err := serverPolicy("", []string{"/opt/srv/node_modules"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	strict := policy.Strict()
	fs := pol.Spec.Filesystem
	if len(fs.Read) != len(strict.Spec.Filesystem.Read)+1 || fs.Read[len(fs.Read)-1] != "/opt/srv/node_modules" ||
		len(fs.Exec) != len(strict.Spec.Filesystem.Exec)+1 || len(fs.Write) != len(strict.Spec.Filesystem.Write) || len(fs.Deny) != len(strict.Spec.Filesystem.Deny) {
		t.Errorf("policy: read %v exec %v write %v", fs.Read, fs.Exec, fs.Write)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 || filepath.Dir(p) != dir {
		t.Errorf("policy file %s: mode %v", p, st.Mode())
	}
}
