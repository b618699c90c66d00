package approval

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// One process serves a name in a directory: a second ServeExclusive of it is refused while
// the first serves (and the first's socket still answers), and takes it once the first has
// stopped. A socket served without the lock (plain Serve) is refused too.
func TestServeExclusiveRefusesALiveServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "api")
	b := newBroker(t, Config{})
	_, stop, err := ServeExclusive(b, "token-0123456789abcdef", dir, "bermd-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ServeExclusive(b, "token-0123456789abcdef", dir, "bermd-a", 100*time.Millisecond); !errors.Is(err, ErrServed) {
		t.Fatalf("a second server of a live socket: %v, want ErrServed", err)
	}
	c := &Client{Dir: dir, Token: "token-0123456789abcdef"}
	socks, _ := c.sockets()
	if len(socks) != 1 {
		t.Fatalf("sockets after the refusal: %v", socks)
	}
	if _, err := c.do(socks[0], "GET", "/v1/approvals", nil); err != nil {
		t.Fatalf("the first's socket after the refusal: %v", err)
	}
	stop()
	_, stop2, err := ServeExclusive(b, "token-0123456789abcdef", dir, "bermd-a", 0)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	stop2()

	_, stop3, err := Serve(b, "token-0123456789abcdef", dir, "bermd-b")
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	if _, _, err := ServeExclusive(b, "token-0123456789abcdef", dir, "bermd-b", 0); !errors.Is(err, ErrServed) {
		t.Fatalf("over a socket served without the lock: %v, want ErrServed", err)
	}
}
