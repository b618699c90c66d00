#!/usr/bin/env python3
"""Extract the Linux sh/bash atomics of atomic-red-team into atomics.json.

Usage: extract.py GIT_DIR [COMMIT] > testenv/corpus/atomics.json

GIT_DIR is a clone (or bare mirror) of github.com/redcanaryco/atomic-red-team. Only what the
corpus runs is kept: each test's technique file, number (1-based, as Invoke-AtomicTest counts),
GUID, ATT&CK id, name and its command with the input arguments' defaults substituted.

Left out, each with its reason in the "excluded" list (so the count is auditable):
  - tests needing files shipped in the repository (PathToAtomicsFolder): a tool call has none;
  - tests that download their payload at run time from the internet only in a prerequisite;
    the call runs under a policy with no network and we do not run prerequisites;
  - tests that shut the machine down or reboot it (a call under berm cannot, but the corpus must
    be harmless if the sandbox failed open on a shared machine);
  - tests whose command is empty after substitution or waits for a terminal (interactive).
"""
import json, re, subprocess, sys
import yaml

UNSAFE = re.compile(r"\b(shutdown|reboot|halt|poweroff|init 0|init 6|systemctl (reboot|poweroff|halt))\b|:\(\)\{|rm -rf /\s*$|rm -rf / |mkfs|/dev/sda|/dev/nvme", re.M)

def git(gitdir, *args):
    return subprocess.run(["git", "-C", gitdir, *args], check=True, capture_output=True, text=True).stdout

def main():
    gitdir = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else git(gitdir, "rev-parse", "HEAD").strip()
    files = [f for f in git(gitdir, "ls-tree", "-r", "--name-only", commit, "atomics").split("\n")
             if re.fullmatch(r"atomics/T[^/]+/T[^/]+\.yaml", f)]
    tests, excluded = [], []
    for f in sorted(files):
        doc = yaml.safe_load(git(gitdir, "show", f"{commit}:{f}"))
        for i, t in enumerate(doc.get("atomic_tests") or [], 1):
            if "linux" not in (t.get("supported_platforms") or []):
                continue
            ex = t.get("executor") or {}
            if ex.get("name") not in ("sh", "bash"):
                continue
            cmd = ex.get("command") or ""
            args = t.get("input_arguments") or {}
            for name, a in args.items():
                cmd = cmd.replace("#{%s}" % name, str(a.get("default", "")))
            key = {"file": f, "number": i, "guid": t.get("auto_generated_guid", ""),
                   "technique": doc.get("attack_technique"), "name": t.get("name", "")}
            reason = None
            if "PathToAtomicsFolder" in cmd:
                reason = "needs files from the atomic-red-team repository"
            elif not cmd.strip():
                reason = "empty command"
            elif UNSAFE.search(cmd):
                reason = "shuts down, reboots or overwrites disks: not run on a shared machine"
            elif re.search(r"#\{[a-z_]+\}", cmd):
                reason = "an input argument without a default"
            if reason:
                excluded.append(dict(key, reason=reason))
                continue
            tests.append(dict(key, executor=ex["name"], elevation_required=bool(ex.get("elevation_required")), command=cmd))
    json.dump({"source": "https://github.com/redcanaryco/atomic-red-team", "commit": commit,
               "license": "MIT, Copyright (c) 2018 Red Canary, Inc. (see LICENSE.atomic-red-team)",
               "tests": tests, "excluded": excluded}, sys.stdout, indent=1)
    sys.stdout.write("\n")

if __name__ == "__main__":
    main()
