package mcpserve

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// The server's policy is the operator's (strict by default) with read and exec of its command
// added, and still compiles; nothing else is loosened and nothing of strict's lost: a policy
// that leaves the lists to strict, or changes them with {add, remove}, keeps strict's.
func TestServerPolicyAddsOnlyTheServersOwnPaths(t *testing.T) {
	strict := policy.Strict().Spec.Filesystem
	const head = "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: op}\nspec:\n"
	for _, tc := range []struct {
		name, policy    string
		read, exec      int // lengths expected, the server's path included
		readEnds, write int
	}{
		{"the built-in strict policy", "", len(strict.Read) + 1, len(strict.Exec) + 1, 0, len(strict.Write)},
		{"a policy that leaves the lists to strict", head + "  approvals: {rules: [{name: w, match: {write: \"${WORKSPACE}/g/**\"}}]}\n",
			len(strict.Read) + 1, len(strict.Exec) + 1, 0, len(strict.Write)},
		{"a policy that adds to strict's", head + "  filesystem:\n    read: {add: [/srv]}\n", len(strict.Read) + 2, len(strict.Exec) + 1, 0, len(strict.Write)},
		{"a policy that writes its own lists", head + "  filesystem:\n    read: [/usr]\n    exec: [/usr]\n", 2, 2, 0, len(strict.Write)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := ""
			if tc.policy != "" {
				src = filepath.Join(dir, "op.yaml")
				if err := os.WriteFile(src, []byte(tc.policy), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := serverPolicy(src, []string{"/opt/srv/node_modules"}, filepath.Join(dir, "out"))
			if err != nil {
				t.Fatal(err)
			}
			pol, err := policy.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			fs := pol.Spec.Filesystem
			if len(fs.Read) != tc.read || len(fs.Exec) != tc.exec || len(fs.Write) != tc.write || len(fs.Deny) != len(strict.Deny) ||
				!slices.Contains(fs.Read, "/opt/srv/node_modules") || !slices.Contains(fs.Exec, "/opt/srv/node_modules") {
				t.Errorf("policy: read %v exec %v write %v deny %d", fs.Read, fs.Exec, fs.Write, len(fs.Deny))
			}
			if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 || filepath.Dir(p) != filepath.Join(dir, "out") {
				t.Errorf("policy file %s: mode %v", p, st.Mode())
			}
		})
	}
}
