package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func sum(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func TestApprovers(t *testing.T) {
	a, err := ParseApprovers("a.yaml", []byte(`people:
  alice: {user: root}
  bot: {tokenSha256: `+sum("bot-token-0123456789")+`}
  eve: {tokenSha256: `+sum("eve-token-0123456789")+`}
groups:
  payments-oncall: [alice, bot]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who       string
		approvers []string
		may       bool
	}{
		{"bot", []string{"payments-oncall"}, true},
		{"alice", []string{"payments-oncall"}, true},
		{"eve", []string{"payments-oncall"}, false},
		{"eve", []string{"eve"}, true},
		{"mallory", []string{"payments-oncall"}, false},
		{"payments-oncall", []string{"payments-oncall"}, true}, // root naming the group itself
		{"anyone", nil, true},
	} {
		if got := a.May(tc.who, tc.approvers); got != tc.may {
			t.Errorf("May(%s, %v) = %v", tc.who, tc.approvers, got)
		}
	}
	if who, ok := a.byToken("bot-token-0123456789"); !ok || who != "bot" {
		t.Errorf("byToken: %q %v", who, ok)
	}
	if _, ok := a.byToken("bot-token-012345678"); ok {
		t.Error("a wrong token is someone")
	}
	if who, ok := a.byUID(0); !ok || who != "alice" {
		t.Errorf("byUID(0): %q %v", who, ok)
	}
	if !a.HasUsers() {
		t.Error("HasUsers")
	}
	// No file: only the names rules give directly.
	var none *Approvers
	if none.May("bob", []string{"payments-oncall"}) || !none.May("payments-oncall", []string{"payments-oncall"}) {
		t.Error("nil approvers")
	}
}

func TestApproversErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "people:\n  a: {user: root, uid: 0}\n", "field uid not found"},
		{"no identity", "people:\n  a: {}\n", "person a: expected a user or a tokenSha256"},
		{"bad hash", "people:\n  a: {tokenSha256: abc}\n", "tokenSha256: expected 64 hex digits"},
		{"unknown user", "people:\n  a: {user: no-such-user-berm}\n", "person a: user: unknown user"},
		{"member not a person", "people:\n  a: {user: root}\ngroups:\n  g: [a, b]\n", "group g: b is not one of people"},
		{"person and group", "people:\n  a: {user: root}\ngroups:\n  a: [a]\n", "a is both a person and a group"},
		{"bad name", "people:\n  'a b': {user: root}\n", `person "a b": expected a name`},
	} {
		_, err := ParseApprovers("a.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
