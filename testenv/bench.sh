#!/usr/bin/env bash
# make bench: every figure berm publishes, measured in one run on this machine. Results go to
# stdout and .bench/results.md; README.md quotes them.
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
  go run ./testenv/bench/launch --bin bin
  for pkg in ./rules ./collector ./agent; do
    if ls $pkg/*_test.go >/dev/null 2>&1 && grep -lq '^func Benchmark' $pkg/*_test.go; then
      echo
      echo "## go test -bench $pkg"
      echo
      echo '```'
      go test -run '^$' -bench . -benchtime 2s $pkg 2>&1 | grep -E '^(Benchmark|ok|PASS|FAIL)' || true
      echo '```'
    fi
  done
} | tee "$out"
