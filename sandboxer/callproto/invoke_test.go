package callproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestInvocationRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args, env []string
	}{
		{"empty", nil, nil},
		{"plain", []string{"--tool", "t", "--", "/bin/true"}, []string{"PATH=/bin", "HOME=/root"}},
		{"empty strings and bytes", []string{"", "\xff\xfe", "a b\n"}, []string{"=", "X="}},
		{"many", slices.Repeat([]string{"x"}, 100000), slices.Repeat([]string{"E=1"}, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendInvocation(nil, tc.args, tc.env)
			args, env, err := ReadInvocation(bufio.NewReader(bytes.NewReader(b)))
			if err != nil {
				t.Fatal(err)
			}
			if len(args) != len(tc.args) || len(env) != len(tc.env) || !slices.Equal(args, append([]string{}, tc.args...)) || !slices.Equal(env, append([]string{}, tc.env...)) {
				t.Fatalf("got %d args, %d env; want %d, %d", len(args), len(env), len(tc.args), len(tc.env))
			}
		})
	}
}

// A hostile or broken front: every malformed invocation is refused with an error, none is
// read past its end, none makes bermd allocate more than MaxInvocation.
func TestInvocationRefusesMalformed(t *testing.T) {
	le := binary.LittleEndian
	withLen := func(body []byte) []byte { return append(le.AppendUint32(nil, uint32(len(body))), body...) }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"too large", le.AppendUint32(nil, MaxInvocation+1), "more than"},
		{"short", le.AppendUint32(nil, 100), "read invocation"},
		{"no counts", withLen(nil), "unexpected EOF"},
		{"count past the end", withLen(le.AppendUint32(nil, 1<<30)), "strings in"},
		{"no NUL", withLen(append(le.AppendUint32(nil, 1), 'a')), "without its NUL"},
		{"no env count", withLen(append(le.AppendUint32(nil, 1), 'a', 0)), "environment"},
		{"trailing", withLen(append(le.AppendUint32(le.AppendUint32(nil, 0), 0), 'z')), "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadInvocation(bufio.NewReader(bytes.NewReader(tc.b)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestLookupEnvLastWins(t *testing.T) {
	inv := &Invocation{Env: []string{"A=1", "AB=2", "A=3", "B"}}
	for name, want := range map[string]string{"A": "3", "AB": "2"} {
		if v, ok := inv.LookupEnv(name); !ok || v != want {
			t.Errorf("%s: %q %v, want %q", name, v, ok, want)
		}
	}
	if _, ok := inv.LookupEnv("B"); ok {
		t.Error("B without = is not set")
	}
}

// The C front (cmd/berm/main.c) speaks this protocol: its constants are these.
func TestCFrontConstants(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "cmd", "berm", "main.c"))
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) string {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (.+)$`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("main.c defines no %s", name)
		}
		return string(m[1])
	}
	for name, want := range map[string]string{
		"DEFAULT_SOCKET": strconv.Quote(DefaultSocket),
		"INVOKE_MAGIC":   "'" + string(rune(InvokeMagic)) + "'",
		"MAX_INVOCATION": "(" + strconv.Itoa(MaxInvocation>>20) + "u << 20)",
		"FRAME_STDERR":   "'" + string(rune(FrameStderr)) + "'",
		"FRAME_FALLBACK": "'" + string(rune(FrameFallback)) + "'",
		"FRAME_END":      "'" + string(rune(FrameEnd)) + "'",
	} {
		if got := def(name); got != want {
			t.Errorf("main.c: %s is %s, callproto's is %s", name, got, want)
		}
	}
	if !strings.Contains(string(src), `"%s.lock"`) || CallerLock("s") != "s.lock" {
		t.Error("main.c's caller lock is not callproto.CallerLock")
	}
}
