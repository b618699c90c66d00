package otelcol

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestTheCollectorIsBuiltAndStartsAgainAfterItWasStopped(t *testing.T) {
	c := ForTest(t)
	for i := 0; i < 2; i++ {
		conn, err := net.DialTimeout("tcp", c.GRPC, 5*time.Second)
		if err != nil {
			t.Fatalf("start %d: the OTLP gRPC receiver does not listen: %v\n%s", i, err, c.Log())
		}
		conn.Close()
		c.Down()
		if conn, err := net.DialTimeout("tcp", c.GRPC, time.Second); err == nil {
			conn.Close()
			t.Fatalf("the receiver still listens after Down")
		}
		if err := c.Up(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGomodsReadsTheManifestsComponents(t *testing.T) {
	mods, err := gomods(manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"go.opentelemetry.io/collector/receiver/otlpreceiver@v0.165.0", "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter@v0.165.0"}
	if len(mods) != len(want) || mods[0] != want[0] || mods[1] != want[1] {
		t.Fatalf("gomods = %q, want %q", mods, want)
	}
}
