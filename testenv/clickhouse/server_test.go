package clickhouse

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	s := ForTest(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() error {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("dial running server: %v", err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("server still running after Kill")
	}
	if err := dial(); err == nil {
		t.Fatal("killed server still accepts connections")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := dial(); err != nil {
		t.Fatalf("dial restarted server: %v", err)
	}
}
