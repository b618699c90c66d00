package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/collector/otel"
)

var (
	otlpEndpoint = flag.String("otlp-endpoint", "", "export one OpenTelemetry span per call (execute_tool {tool}, GenAI attributes) and each alert as a log record to this OTLP receiver, HOST:PORT (empty: off)")
	otlpProtocol = flag.String("otlp-protocol", otel.ProtocolGRPC, "OTLP transport: "+otel.ProtocolGRPC+" or "+otel.ProtocolHTTP)
)

// startOTLP follows the journal's calls to --otlp-endpoint when one is given; the returned
// stop ends it (a batch in flight is
// exported again after a restart, with the same ids) and closes its connection.
func startOTLP(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir, host string) (stop func(), err error) {
	if *otlpEndpoint == "" {
		if *otlpProtocol != otel.ProtocolGRPC {
			return nil, fmt.Errorf("--otlp-protocol needs --otlp-endpoint")
		}
		return func() {}, nil
	}
	x, err := otel.New(otel.Config{StateDir: stateDir, Endpoint: *otlpEndpoint, Protocol: *otlpProtocol, Hostname: host, Registry: reg, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := x.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("otlp exporter stopped", "err", err)
		}
	}()
	log.Info("calls exported over otlp", "endpoint", *otlpEndpoint, "protocol", *otlpProtocol)
	return func() {
		cancel()
		<-done
		x.Close()
	}, nil
}
