#!/usr/bin/env bash
# Installs the Debian packages berm's build, tests and demo use, when they are missing: the
# packages named as arguments, or all of them.
set -euo pipefail
# socat and ripgrep: what srt (the load bench's second peer) needs to run; chromium: the
# dashboards' browser tests.
pkgs=(clang llvm libbpf-dev gcc libc6-dev bpftool bubblewrap clickhouse-server clickhouse-client python3 iproute2 qemu-system-x86 busybox-static xz-utils util-linux nodejs prometheus socat ripgrep chromium unzip)
if [ $# -gt 0 ]; then pkgs=("$@"); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm for dashboards/plugin's frontend tests: Debian's package, unless the nodejs installed
# brings its own (NodeSource's provides and conflicts with Debian's npm).
if [ $# -eq 0 ] && ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
# pip for sandboxer's package-manager test through injected credentials (Debian's python3 has
# none; a python3 that brings its own is enough). It installs with --target: no system change.
if [ $# -eq 0 ] && ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing packages: ${missing[*]} (run as root, e.g. sudo make test)" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# bpffs for pinning (not mounted by default on this machine kind).
if [ "$(id -u)" = 0 ] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
  mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
fi
