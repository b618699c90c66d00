#!/usr/bin/env bash
# The seed incident, reproduced as a berm tool call: a "clean up temp files" tool that
# recursively deletes its workspace's temp folder. berm runs it in its own cgroup and
# namespaces, traces it with eBPF, and prints the call's timeline from the journal.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "make demo needs root (eBPF, cgroups): sudo make demo" >&2; exit 1; fi
berm=bin/berm
state=${BERM_DEMO_STATE:-/var/lib/berm}
demo=$(mktemp -d /run/berm-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
chmod 755 "$demo"
ws=$demo/workspace
mkdir -p "$ws/temp/cache" "$ws/src"
for i in 1 2 3; do echo "scratch $i" > "$ws/temp/scratch-$i.tmp"; done
echo "customer export" > "$ws/temp/cache/customers.csv"
echo "print('hello')" > "$ws/src/app.py"
cp testenv/tools/cleanup_temp.py "$ws/.cleanup_temp.py"
chown -R 65534:65534 "$ws"

call=demo-cleanup-$(date +%s)
echo "== berm run: the 'cleanup-temp' tool on $ws (call $call)"
set +e
$berm run --state-dir "$state" --daemon never --tool cleanup-temp --tenant demo --call-id "$call" \
  --workspace "$ws" --summary "$demo/summary.json" -- python3 .cleanup_temp.py
status=$?
set -e
echo "== tool exited with status $status"
echo "== workspace after the call:"
(cd "$ws" && find . -path ./.cleanup_temp.py -prune -o -print | sort)
echo
echo "== berm timeline $call (deletions and the tool's own actions):"
$berm timeline --state-dir "$state" "$call" | grep -E -v ' open .*(RDONLY|CLOEXEC).* -> ([0-9]+|ENOENT)$' | grep -v '/usr/lib/python' | head -80
echo
echo "== berm calls --tool cleanup-temp:"
$berm calls --state-dir "$state" --tool cleanup-temp | tail -5
