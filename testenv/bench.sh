#!/usr/bin/env bash
# make bench: every figure berm publishes, measured in one run on this machine. Results go to
# stdout and .bench/results.md; testenv/bench/README.md quotes them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "make bench needs root: sudo make bench" >&2; exit 1; fi
mkdir -p .bench
out=.bench/results.md
{
  echo "# berm benchmark results"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) cores"
  echo
  # Launch latency and its per-phase breakdown, berm run without a running bermd (embedded and
  # on demand), syscall costs, and a soak of 10k calls with floods (≈2–3 min; --soak 0 skips it).
  # Alone: go run ./testenv/bench/launch --bin bin --warm-only --soak 0 measures the warm
  # launches (interleaved with bare exec and bwrap) and their per-phase breakdown in ≈20 s.
  go run ./testenv/bench/launch --bin bin
  echo; go run ./testenv/bench/trail --bin bin # the audit trail under a flood, and its throughput (issue 10)
  # berm events as JSON lines and as Tetragon's events, read once and followed, against the
  # journal read raw (issue 28; ≈15 s)
  echo; go run ./testenv/bench/events --bin bin
  # A call in an empty workspace against one of 1,000,000 files, through bermd and embedded
  # (issue 29); the files are made once (≈1 min) and kept in $TMPDIR/berm-bench-bigworkspace.
  echo; go run ./testenv/bench/bigworkspace --bin bin
  # What the node pays (issue 29): a host getppid loop with no agent, bermd idle, bermd running
  # calls, the three in each of 5 rounds (≈1 min).
  echo; go run ./testenv/bench/nodecost --bin bin
  # Each package's Go benchmarks; the collector's ships 300k events per round, 5 rounds.
  # dnsguard: the latency the resolver adds per query, and a connect with 1k pinned addresses (issue 15);
  # secrets: the output redactor and the trail scrub of the credential surface (issue 13).
  # collector/otel: the OTLP exporter's cost per call, built only and sent to a real collector (issue 28).
  # mcpserve: a tools/call through berm mcp serve against berm run, the proxy against the bare
  # MCP server (issue 24; needs npm and starts its own bermd).
  for spec in "./rules 2s" "./collector 5x" "./collector/otel 2000x" "./agent/netguard 2s" "./agent/dnsguard 2s" "./agent/secrets 1s" "./cmd/internal/mcpserve 30x"; do
    set -- $spec
    echo
    echo "## go test -bench $1"
    echo
    echo '```'
    go test -run '^$' -bench . -benchtime "$2" "$1" 2>&1 | grep -E '^(Benchmark|ok|PASS|FAIL|---)' || true
    echo '```'
  done
  # approvals: what exec rules cost an ungated exec, against the same policy without them (issue 14).
  echo
  echo "## go test -bench ApprovalExecUngated ./sandboxer"
  echo
  echo '```'
  go test -run '^$' -bench ApprovalExecUngated -benchtime 3x ./sandboxer 2>&1 | grep -E '^(Benchmark|ok|PASS|FAIL|---)' || true
  echo '```'
  # injected credentials: what the injecting egress adds to an HTTPS request (keep-alive) and to a
  # new connection (handshakes included), against the secret in an environment variable (issue 27);
  # and what the inspecting relay adds to a request to another host from an injected call.
  echo
  echo "## go test -bench 'InjectedRequest|InspectedRequest' ./sandboxer"
  echo
  echo '```'
  go test -run '^$' -bench 'InjectedRequest|InspectedRequest' -benchtime 2x ./sandboxer 2>&1 | grep -E '^(Benchmark|ok|PASS|FAIL|---)' || true
  echo '```'
} | tee "$out"
