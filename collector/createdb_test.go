package collector

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A collector pointed at a database the server does not have creates it (and its tables),
// rather than retry a connection the server "refused" forever.
func TestCollectorCreatesItsDatabase(t *testing.T) {
	s := server(t)
	name := fmt.Sprintf("absent%d", time.Now().UnixNano())
	dsn := s.DSN(name)
	c, _ := newCollector(t, t.TempDir(), dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatalf("a collector on a server without database %s: %v", name, err)
	}
	conn := connect(t, s.DSN("default"))
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	if n := count(t, conn, "SELECT count() FROM system.tables WHERE database = '"+name+"' AND name = 'schema_migrations'"); n != 1 {
		t.Fatalf("database %s has no schema_migrations after the collector ran (%d)", name, n)
	}
}
