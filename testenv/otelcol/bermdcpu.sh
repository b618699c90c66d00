#!/bin/bash
# bermd's CPU (utime+stime, clock ticks of 10 ms) over N calls that read /etc/shadow (rules on),
# without and with --otlp-endpoint, twice. Run as root from the repository after make build, with
# the collector built (go test ./testenv/otelcol). Prints the spans the collector got (N+5 per run).
set -e
B=${B:-bin}
N=${N:-200}
COL=${COL:-$(ls /var/cache/berm/otelcol/*/otelcol-berm | head -1)}
measure() {
  local mode=$1; shift
  D=$(mktemp -d)
  $B/bermd --state-dir $D/state --socket $D/sock --metrics "" --no-rules=false "$@" 2>$D/log &
  P=$!
  for i in $(seq 100); do [ -S $D/sock ] && break; sleep 0.1; done
  for i in 1 2 3 4 5; do $B/berm run --socket $D/sock --daemon required -- true >/dev/null; done
  sleep 1
  read -r u0 s0 < <(awk '{print $14, $15}' /proc/$P/stat)
  t0=$(date +%s.%N)
  for i in $(seq $N); do $B/berm run --socket $D/sock --daemon required -- sh -c 'cat /etc/shadow 2>/dev/null; exit 0' >/dev/null; done
  sleep 2
  read -r u1 s1 < <(awk '{print $14, $15}' /proc/$P/stat)
  t1=$(date +%s.%N)
  kill -INT $P; wait $P || true
  echo "$mode: bermd cpu ticks $(( (u1-u0)+(s1-s0) )) over $N calls (user $((u1-u0)) sys $((s1-s0))), wall $(echo "$t1-$t0" | bc)"
  rm -rf $D
}
CD=$(mktemp -d)
cat > $CD/c.yaml <<YAML
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:24317
exporters:
  file:
    path: $CD/out.json
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [file]}
    logs: {receivers: [otlp], exporters: [file]}
YAML
$COL --config $CD/c.yaml >$CD/log 2>&1 &
CP=$!
sleep 2
for r in 1 2; do
  measure off
  measure on --otlp-endpoint 127.0.0.1:24317
done
kill $CP; wait $CP || true
echo "spans in collector file: $(grep -o '"name":"execute_tool' $CD/out.json | wc -l)"
rm -rf $CD
