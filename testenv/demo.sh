#!/usr/bin/env bash
# The seed incident, reproduced as a berm tool call: a "clean up temp files" tool that
# recursively deletes its workspace's temp folder, where temp is in fact a separate file
# system (here a tmpfs standing in for a customer's storage bucket) bound into the workspace.
# berm runs the tool in its own cgroup and namespaces under the built-in strict policy, traces
# it with eBPF, and prints the call's timeline from the journal: the delete is denied and the
# customer's files are intact.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "make demo needs root (eBPF, cgroups): sudo make demo" >&2; exit 1; fi
# The demo's tool is a Python script; the bucket is a tmpfs mounted with util-linux.
testenv/install-deps.sh python3 util-linux
berm=bin/berm
state=${BERM_DEMO_STATE:-/var/lib/berm}
demo=$(mktemp -d /run/berm-demo.XXXXXX)
ws=$demo/workspace
bucket=$demo/customer-bucket
cleanup() {
  umount -l "$ws/temp" 2>/dev/null || true
  umount -l "$bucket" 2>/dev/null || true
  rm -rf "$demo"
}
trap cleanup EXIT
chmod 755 "$demo"
mkdir -p "$ws/temp" "$ws/src" "$bucket"
mount -t tmpfs -o size=8m customer-bucket "$bucket"
for i in 01 02 03 04 05; do echo "id,name,email" > "$bucket/customers-$i.csv"; done
mount --bind "$bucket" "$ws/temp"
echo "print('hello')" > "$ws/src/app.py"
cp testenv/tools/cleanup_temp.py "$ws/cleanup_temp.py"
chown -R 65534:65534 "$ws/src" "$ws/cleanup_temp.py" "$ws"

call=demo-cleanup-$(date +%s)
echo "== the customer's bucket, bound at workspace/temp:"
ls "$ws/temp"
echo
echo "== berm run: the 'cleanup-temp' tool (call $call), built-in strict policy"
set +e
$berm run --state-dir "$state" --daemon never --tool cleanup-temp --tenant demo --call-id "$call" \
  --workspace "$ws" -- python3 cleanup_temp.py
status=$?
set -e
echo "== tool exited with status $status"
echo
echo "== the customer's bucket after the call ($(ls "$bucket" | wc -l) files):"
ls "$bucket"
mountpoint -q "$ws/temp" && echo "(still mounted at workspace/temp on the host)"
echo
echo "== berm timeline $call (the tool's own actions; library loading left out):"
$berm timeline --state-dir "$state" "$call" | grep -E -v ' open .*(RDONLY|CLOEXEC).* -> ([0-9]+|ENOENT)$' | grep -v -E '/usr/lib/python|berm-init|/work/|bin/berm ' | head -60
echo
echo "== berm calls --tool cleanup-temp:"
$berm calls --state-dir "$state" --tool cleanup-temp | tail -5
