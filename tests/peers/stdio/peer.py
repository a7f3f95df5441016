"""Shared behaviour of the stdio MCP test peers (imported by the scripts beside it).

A minimal newline-delimited JSON-RPC server: initialize, tools/list, tools/call "echo",
and tools/call "ask" (arguments.method): it sends that server-to-client request, waits for
its answer and returns the answer as the tool's text (`result:...` or `error:...`).
`--name NAME` is the serverInfo name initialize answers with.
Every request may carry params._delay_ms (answer late). tools/call echo with
params._meta.progressToken emits a notifications/progress with that token before the
result. No payloads on stderr; everything on stdout is flushed line by line.
"""

import json
import os
import sys
import time

GARBAGE = [b"hello, not json", b"[1, 2, 3]", b'{"unterminated": ', b"\xff\xfe\x00 binary", b""]


def write_line(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def send(obj) -> None:
    write_line(json.dumps(obj, separators=(",", ":")).encode())


def answer(req, garbage: bool) -> None:
    method = req.get("method")
    rid = req.get("id")
    params = req.get("params") or {}
    if method is None or rid is None:
        return  # notifications and client responses get no answer
    delay = params.get("_delay_ms") if isinstance(params, dict) else None
    if delay:
        time.sleep(delay / 1000.0)
    if garbage:
        for line in GARBAGE:
            write_line(line)
    if method == "initialize" and flag("--modern"):
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32022, "message": "connection is serving the 2026-07-28 protocol",
              "data": {"supported": ["2026-07-28"], "requested": params.get("protocolVersion")}}})
        return
    if method == "initialize":
        result = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": arg("--name") or "tunnelgate-stdio-peer", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call" and params.get("name") == "echo":
        args = params.get("arguments") or {}
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 1, "total": 1}})
        result = {"content": [{"type": "text", "text": str(args.get("text", ""))}]}
    elif method == "tools/call" and params.get("name") == "ask":
        result = {"content": [{"type": "text", "text": ask((params.get("arguments") or {}).get("method"))}]}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


ASKED = [0]


def ask(method) -> str:
    """Sends a server request and reads stdin until its answer arrives."""
    ASKED[0] += 1
    sid = f"srv-{ASKED[0]}"
    send({"jsonrpc": "2.0", "id": sid, "method": method, "params": {}})
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            sys.exit(0)
        log_received(LOG[0], raw)
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("id") == sid and "method" not in msg:
            if "error" in msg:
                return "error:" + str(msg["error"].get("message"))
            return "result:" + json.dumps(msg.get("result"), separators=(",", ":"))


LOG = [None]


def log_received(path, raw: bytes) -> None:
    if path:
        with open(path, "ab") as f:
            f.write(raw.rstrip(b"\n") + b"\n")
            f.flush()


def serve(log_path=None, garbage=False) -> None:
    LOG[0] = log_path
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            return
        log_received(log_path, raw)
        try:
            req = json.loads(raw)
        except ValueError:
            continue
        if isinstance(req, dict):
            answer(req, garbage)


def once(marker: str) -> bool:
    """True the first time it is called for this marker file (across processes)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def arg(name, default=None):
    argv = sys.argv[1:]
    if name in argv:
        i = argv.index(name)
        return argv[i + 1] if i + 1 < len(argv) else default
    return default


def flag(name) -> bool:
    return name in sys.argv[1:]
