package collector

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

func TestBadDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"http://127.0.0.1:8123/default", "native protocol"},
		{"clickhouse:///default", "no host"},
		{"clickhouse://127.0.0.1:9000/no-such;db", "not a plain identifier"},
		{"::not a url", "parse clickhouse dsn"},
	} {
		_, err := New(Config{StateDir: t.TempDir(), DSN: tc.dsn})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q) = %v, want an error with %q", tc.dsn, err, tc.want)
		}
		if _, err := OpenSource(context.Background(), tc.dsn); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenSource(%q) = %v, want an error with %q", tc.dsn, err, tc.want)
		}
	}
}

// TestUnreachable: nothing listening and a peer that accepts and says nothing fail with a
// clear error in seconds; so does a reader of a database that does not exist (a collector
// creates its database: TestCollectorCreatesItsDatabase).
func TestUnreachable(t *testing.T) {
	port, err := chtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	type unreachable struct {
		name, dsn, want string
		readerOnly      bool // a collector creates the database; a reader says it is not there
	}
	cases := []unreachable{
		{"refused", "clickhouse://127.0.0.1:" + itoa(port) + "/default", "dial clickhouse 127.0.0.1:" + itoa(port), false},
		{"silent", "clickhouse://" + silent.Addr().String() + "/default?dial_timeout=1s", "dial clickhouse " + silent.Addr().String(), false},
	}
	if s := server(t); s != nil {
		cases = append(cases, unreachable{"no database", s.DSN("no_such_db"), "no_such_db", true})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if !tc.readerOnly {
				c, _ := newCollector(t, t.TempDir(), tc.dsn, nil)
				start := time.Now()
				err = c.RunOnce(context.Background())
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("RunOnce = %v, want an error with %q", err, tc.want)
				}
				if d := time.Since(start); d > 8*time.Second {
					t.Fatalf("RunOnce took %s to fail", d)
				}
			}
			if _, err := OpenSource(context.Background(), tc.dsn); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenSource = %v, want an error with %q", err, tc.want)
			}
			t.Logf("error: %v", err)
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
