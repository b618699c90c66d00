package approval

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/secrets"
)

// Every byte of a name that is not printable text shows as an escape; printable text,
// including non-ASCII letters, shows as it is; a backslash is doubled so the escape is
// unambiguous, except by EscapeControls (text escaped once already).
func TestEscapeShowsEveryNonPrintableByte(t *testing.T) {
	for _, tc := range []struct{ in, want, controls string }{
		{"/ws/data/cache.tmp", "/ws/data/cache.tmp", "/ws/data/cache.tmp"},
		{"customers.db\x1b[12D\x1b[Kcache.tmp", `customers.db\x1b[12D\x1b[Kcache.tmp`, `customers.db\x1b[12D\x1b[Kcache.tmp`},
		{"a\r\nb\tc\bd\x7f", `a\r\nb\tc\x08d\x7f`, `a\r\nb\tc\x08d\x7f`},
		{"csi\u009b2J", `csi\u009b2J`, `csi\u009b2J`},
		{"bidi\u202etxt.exe", `bidi\u202etxt.exe`, `bidi\u202etxt.exe`},
		{"zero\u200bwidth\ufeff", `zero\u200bwidth\ufeff`, `zero\u200bwidth\ufeff`},
		{"nbsp\u00a0", `nbsp\u00a0`, `nbsp\u00a0`},
		{"bad\xff\xc3utf8", `bad\xff\xc3utf8`, `bad\xff\xc3utf8`},
		{"données-日本.txt", "données-日本.txt", "données-日本.txt"},
		{`back\x1bslash`, `back\\x1bslash`, `back\x1bslash`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if got := EscapeControls(tc.in); got != tc.controls {
			t.Errorf("EscapeControls(%q) = %s, want %s", tc.in, got, tc.controls)
		}
		if got := EscapeControls(Escape(tc.in)); got != Escape(tc.in) {
			t.Errorf("escaped twice: %s", got)
		}
	}
}

// A request whose object holds a live secret is denied at once: it is never pending, never
// posted, never prompted, and what the broker logs is redacted; any other request leaves the
// broker escaped, on every channel.
func TestBrokerDeniesAnObjectHoldingASecretAndEscapesTheRest(t *testing.T) {
	reg := secrets.NewRegistry(nil)
	defer reg.Add(secrets.Owner{CallKey: "k", Name: "db"}, []byte("s3cr3t-value-42"))()
	posted := make(chan WebhookBody, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b WebhookBody
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &b)
		posted <- b
	}))
	defer srv.Close()
	var log lockedBuf
	prompted := make(chan *Request, 4)
	b := newBroker(t, Config{Secrets: reg, Webhook: &Webhook{URL: srv.URL, Secret: []byte("k")}, Prompt: promptFunc(func(r *Request) { prompted <- r }), Log: testLogger(&log)})
	var registered *Request
	d := b.AskWith(&Request{CallID: "c", Action: "unlink", Object: "/ws/reports/s3cr3t-value-42"}, time.Minute, nil, func(r *Request) { registered = r })
	if d.Outcome != Denied || d.Channel != ChannelBroker || !strings.Contains(d.Reason, "db (raw)") {
		t.Fatalf("decision %+v", d)
	}
	if registered == nil || registered.Object != "/ws/reports/[berm:redacted:db]" {
		t.Fatalf("registered %+v", registered)
	}
	if strings.Contains(log.String(), "s3cr3t") || !strings.Contains(log.String(), "[berm:redacted:db]") {
		t.Errorf("log: %s", log.String())
	}
	// The next request is asked about: the webhook and the prompt get it escaped.
	go b.Ask(&Request{CallID: "c", Action: "unlink", Object: "/ws/customers.db\x1b[12D\x1b[Kcache.tmp"}, time.Minute, nil)
	want := `/ws/customers.db\x1b[12D\x1b[Kcache.tmp`
	if got := <-posted; got.Request.Object != want {
		t.Errorf("webhook object %q, want %q", got.Request.Object, want)
	}
	if got := <-prompted; got.Object != want {
		t.Errorf("prompt object %q, want %q", got.Object, want)
	}
	if l := waitPending(t, b, 1); l[0].Object != want {
		t.Errorf("listed object %q", l[0].Object)
	}
	select {
	case p := <-posted:
		t.Errorf("the denied request was posted too: %+v", p)
	default:
	}
}

type promptFunc func(r *Request)

func (f promptFunc) Ask(r *Request, abandon <-chan struct{}) (bool, string, string, bool) {
	f(r)
	<-abandon
	return false, "", "", false
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
