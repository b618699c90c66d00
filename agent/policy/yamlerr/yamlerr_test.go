package yamlerr

import (
	"errors"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestSyntax(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		pos       Pos
		msg       string
	}{
		{"unclosed list", "a: [\n", Pos{"f.yaml", 1, 1}, "did not find expected node content"},
		{"bad indent", "a:\n  b: 1\n c: 2\n", Pos{"f.yaml", 2, 1}, "did not find expected key"},
		{"tab", "a:\n\tb: 1\n", Pos{"f.yaml", 2, 1}, "found character that cannot start any token"},
		// yaml.v3 numbers no line for these: the offending byte is found, or the first line
		{"tab on the first line", "\tb: 1\n", Pos{"f.yaml", 1, 1}, "found character that cannot start any token"},
		{"control character", "a: 1\nb: x\x01\n", Pos{"f.yaml", 2, 5}, "control characters are not allowed"},
		{"invalid UTF-8", "a: 1\nbé: \xff\xfe\n", Pos{"f.yaml", 2, 5}, "invalid leading UTF-8 octet"},
		{"after CR line breaks", "a: 1\r\nb: 2\rc: \x02\n", Pos{"f.yaml", 3, 4}, "control characters are not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tc.doc), &n)
			if err == nil {
				t.Fatal("no decode error")
			}
			pos, msg := Syntax("f.yaml", []byte(tc.doc), err)
			if pos != tc.pos || msg != tc.msg {
				t.Fatalf("%q: got %v %q, want %v %q", err, pos, msg, tc.pos, tc.msg)
			}
		})
	}
	// a "line N" later in the message places it, and the message stays whole
	pos, msg := Syntax("f.yaml", nil, errors.New("yaml: unmarshal errors:\n  line 4: cannot unmarshal"))
	if pos != (Pos{"f.yaml", 4, 1}) || msg != "unmarshal errors:\n  line 4: cannot unmarshal" {
		t.Fatalf("got %v %q", pos, msg)
	}
	// no line, and nothing in the bytes YAML refuses: the first line
	if pos, msg := Syntax("f.yaml", []byte("a"), errors.New("yaml: control characters are not allowed")); pos != (Pos{"f.yaml", 1, 1}) || msg != "control characters are not allowed" {
		t.Fatalf("got %v %q", pos, msg)
	}
}

func TestFormat(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("a:\n  b: 1\n"), &n); err != nil {
		t.Fatal(err)
	}
	b := n.Content[0].Content[1].Content[0] // the key b
	for _, tc := range []struct {
		pos     Pos
		in, msg string
		want    string
	}{
		{At("p.yaml", b), "spec.a", "unknown field", "p.yaml:2:3: spec.a: unknown field"},
		{At("p.yaml", b), "", "bad", "p.yaml:2:3: bad"},
		{At("p.yaml", nil), `rule "x"`, "bad", `p.yaml: rule "x": bad`},
	} {
		if got := Format(tc.pos, tc.in, tc.msg); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestEveryNodeIsNamedForItsMessage(t *testing.T) {
	for _, tc := range []struct {
		src            string
		kind, describe string
	}{
		{"{a: 1}", "a mapping", "a mapping"},
		{"[1, 2]", "a list", "a list"},
		{"hello", "a scalar", `"hello"`},
		{"'a \"quoted\"\n line'", "a scalar", `"a \"quoted\" line"`},
		{"42", "a scalar", "42"},
		{"true", "a scalar", "true"},
		{"~", "a scalar", "nothing"},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
			t.Fatal(err)
		}
		n := doc.Content[0]
		if got := Kind(n); got != tc.kind {
			t.Errorf("Kind(%s) = %s, want %s", tc.src, got, tc.kind)
		}
		if got := Describe(n); got != tc.describe {
			t.Errorf("Describe(%s) = %s, want %s", tc.src, got, tc.describe)
		}
	}
	alias := &yaml.Node{Kind: yaml.AliasNode}
	if Kind(alias) != "an alias" || Describe(alias) != "an alias" {
		t.Errorf("an alias is named %s / %s", Kind(alias), Describe(alias))
	}
	if Kind(&yaml.Node{}) != "nothing" {
		t.Errorf("a node of no kind is named %s", Kind(&yaml.Node{}))
	}
}
