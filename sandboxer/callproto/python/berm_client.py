"""A client of berm's run protocol (../PROTOCOL.md), in Python's standard library alone.

    import berm_client
    r = berm_client.run(["/bin/sh", "-c", "echo hi"])
    r.exit_status, r.stdout, r.record["call_id"]

run() captures the tool's output through pipes it reads while the call runs (the protocol's
streaming rules); run_with_fds() passes descriptors of the caller's own (a terminal, files),
and nothing but the reply is read. calls() and timeline() read the trail through bermd.

As a command: python3 berm_client.py [--socket S] [--tenant T] [--policy P] [--workspace W]
-- CMD ARGS... runs CMD with this process's stdio and exits with its status.
"""

import json
import os
import selectors
import signal
import socket
import sys
import time

PROTOCOL_VERSION = "1.0"
DEFAULT_SOCKET = "/run/berm/bermd.sock"
RUN_MAGIC = b"R"
READ_MAGIC = b"Q"

__all__ = ["run", "run_with_fds", "calls", "timeline", "Result", "BermError", "PROTOCOL_VERSION"]


class BermError(Exception):
    """bermd did not run the call (a refusal, a bad request) or did not answer."""


class Result:
    """A call that ran: its status, its record and (run()) its output."""

    def __init__(self, reply, stdout=b"", stderr=b""):
        self.reply = reply
        self.exit_status = reply.get("exit_status")
        self.record = reply.get("record")
        self.warning = reply.get("warning", "")
        self.version = reply.get("version", "")
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return "Result(exit_status=%r, call_id=%r, end_reason=%r)" % (
            self.exit_status, (self.record or {}).get("call_id"), (self.record or {}).get("end_reason"))


def _call_id():
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(4).hex()


def _request(argv, tool, tenant, call_id, workspace, env, policy_file, limits, explicit, version):
    if not argv:
        raise ValueError("argv: a command is needed")
    call_id = call_id or _call_id()
    base = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=" + (workspace or ""),  # empty: bermd fills it with the workspace it makes
        "TMPDIR=/tmp",
        "LANG=C.UTF-8",
        "BERM_CALL_ID=" + call_id,
        "BERM_TOOL=" + tool,
        "BERM_TENANT=" + (tenant or ""),  # empty: bermd fills it with the tenant it picks
    ]
    req = {
        "version": version,
        "call_id": call_id,
        "tool": tool,
        "tenant": tenant or "",
        "argv": list(argv),
        "workspace": os.path.abspath(workspace) if workspace else "",
        "env": base + ["%s=%s" % kv for kv in (env or {}).items()],
        "limits": dict(limits or {}),
    }
    if explicit:
        req["explicit"] = list(explicit)
    if policy_file:
        req["policy_file"] = os.path.abspath(policy_file)
    return (json.dumps(req) + "\n").encode()


def _connect(socket_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(socket_path)
    except OSError as e:
        s.close()
        raise BermError("connect to bermd at %s: %s" % (socket_path, e)) from e
    return s


def _reply(line):
    if not line.endswith(b"\n"):
        raise BermError("bermd ended the call without a reply")
    rep = json.loads(line)
    v = rep.get("version", "")
    if v and v.split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
        raise BermError("bermd speaks protocol %s, this client %s" % (v, PROTOCOL_VERSION))
    if rep.get("record") is None:
        raise BermError(rep.get("error") or "bermd replied without a record or an error")
    return rep


def run_with_fds(argv, stdin=0, stdout=1, stderr=2, *, socket_path=DEFAULT_SOCKET, tool="adhoc", tenant="",
                 call_id=None, workspace="", env=None, policy_file="", limits=None, explicit=None,
                 interrupt_on_signals=False, version=PROTOCOL_VERSION):
    """Run a call with the given descriptors as its stdio; returns a Result (no output captured).

    interrupt_on_signals: SIGINT and SIGTERM to this process are passed on as the protocol's
    interrupts (main thread only)."""
    req = _request(argv, tool, tenant, call_id, workspace, env, policy_file, limits, explicit, version)
    s = _connect(socket_path)
    old = {}
    try:
        socket.send_fds(s, [RUN_MAGIC], [stdin, stdout, stderr])
        s.sendall(req)
        if interrupt_on_signals:
            names = {signal.SIGINT: "interrupt", signal.SIGTERM: "terminated"}
            for sig, name in names.items():
                old[sig] = signal.signal(sig, lambda _s, _f, n=name: s.sendall(json.dumps({"signal": n}).encode() + b"\n"))
        line = s.makefile("rb").readline()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        s.close()
    return Result(_reply(line))


def run(argv, *, stdin=b"", socket_path=DEFAULT_SOCKET, tool="adhoc", tenant="", call_id=None, workspace="",
        env=None, policy_file="", limits=None, explicit=None, version=PROTOCOL_VERSION):
    """Run a call, feeding it stdin (bytes) and capturing its stdout and stderr; returns a Result.

    The streaming rules of PROTOCOL.md: the ends passed are closed here right after they are
    sent, the output is read (and stdin written) while waiting for the reply, and read to its
    end after it."""
    req = _request(argv, tool, tenant, call_id, workspace, env, policy_file, limits, explicit, version)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        s = _connect(socket_path)
    except BermError:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    try:
        socket.send_fds(s, [RUN_MAGIC], [in_r, out_w, err_w])
    finally:
        # 1. our copies of the ends the tool has: else no end-of-file ever comes.
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    sel = selectors.DefaultSelector()
    out, err, reply = bytearray(), bytearray(), bytearray()
    pending = memoryview(bytes(stdin or b""))
    try:
        s.sendall(req)
        s.setblocking(False)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        sel.register(s, selectors.EVENT_READ)
        if len(pending):
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
            in_w = -1
        done_reply = False
        open_fds = 2
        # 2-4: read both outputs, write stdin and wait for the reply together, until the reply
        # has come and both outputs are at their end.
        while not done_reply or open_fds:
            for key, _ in sel.select():
                fd = key.fd if key.fileobj is not s else None
                if key.fileobj is s:
                    try:
                        chunk = s.recv(65536)
                    except BlockingIOError:
                        continue
                    reply += chunk
                    if not chunk or b"\n" in reply:
                        done_reply = True
                        sel.unregister(s)
                elif fd == in_w:
                    try:
                        n = os.write(in_w, pending[:65536])
                        pending = pending[n:]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not len(pending):
                        sel.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                else:
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        (out if fd == out_r else err).extend(chunk)
                    else:
                        sel.unregister(fd)
                        open_fds -= 1
    finally:
        sel.close()
        s.close()
        for fd in (in_w, out_r, err_r):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
    line = bytes(reply).split(b"\n", 1)[0] + (b"\n" if b"\n" in reply else b"")
    return Result(_reply(line), bytes(out), bytes(err))


def _read(req, socket_path):
    s = _connect(socket_path)
    try:
        req = dict(req, version=PROTOCOL_VERSION)
        s.sendall(READ_MAGIC + json.dumps(req).encode() + b"\n")
        line = s.makefile("rb").readline()
    finally:
        s.close()
    if not line.endswith(b"\n"):
        raise BermError("bermd ended the read without a reply")
    rep = json.loads(line)
    if rep.get("error"):
        raise BermError(rep["error"])
    return rep


def calls(*, socket_path=DEFAULT_SOCKET, tool="", tenant="", since=""):
    """The calls the caller may read: a list of {"start", "record"}, oldest first."""
    req = {"read": "calls"}
    for k, v in (("tool", tool), ("tenant", tenant), ("since", since)):
        if v:
            req[k] = v
    return _read(req, socket_path).get("calls") or []


def timeline(call, *, socket_path=DEFAULT_SOCKET):
    """One call ({"start", "record"}) and its events."""
    rep = _read({"read": "timeline", "call": call}, socket_path)
    return rep.get("call"), rep.get("events") or []


def main(args):
    opts = {"socket_path": DEFAULT_SOCKET}
    names = {"--socket": "socket_path", "--tenant": "tenant", "--policy": "policy_file",
             "--workspace": "workspace", "--tool": "tool", "--call-id": "call_id"}
    while args and args[0] != "--":
        if args[0] in names and len(args) > 1:
            opts[names[args[0]]] = args[1]
            args = args[2:]
        else:
            sys.stderr.write("usage: berm_client.py [--socket S] [--tenant T] [--policy P] [--workspace W] "
                             "[--tool T] [--call-id ID] -- CMD ARGS...\n")
            return 2
    if len(args) < 2:
        sys.stderr.write("berm_client.py: no command\n")
        return 2
    try:
        r = run_with_fds(args[1:], interrupt_on_signals=True, **opts)
    except BermError as e:
        sys.stderr.write("berm: %s\n" % e)
        return 1
    if r.warning:
        sys.stderr.write("berm: warning: %s\n" % r.warning)
    return r.exit_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
