"""Fault-injecting stdio MCP server for the fault soak (tests/it/soak.rs).

    soak.py LOG

Appends to LOG, one line each, flushed before anything else happens:
  "spawn PID"        when a child starts;
  "recv MARKER"      for every request line read (MARKER is params.arguments.soak,
                     or "-" when the request carries none).
A request's fault is params.arguments.fault:
  "ok"               answer with the marker as text;
  "slow:MS"          answer after MS milliseconds;
  "die"              exit without answering (the request was read);
  "die_partial"      write the start of the answer, then exit.
Requests without a marker (tools/list) are answered as peer.py does. The gateway's own
handshake (`initialize`, `notifications/initialized`) is answered and not logged.
"""

import json
import os
import sys
import time

import peer

LOG = sys.argv[1]
# The gateway's own handshake with every child: answered, never logged (no caller sent it).
HANDSHAKE = ("initialize", "notifications/initialized")


def log(line: str) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main() -> None:
    log(f"spawn {os.getpid()}")
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            return
        try:
            req = json.loads(raw)
        except ValueError:
            log("recv -")
            continue
        if not isinstance(req, dict):
            log("recv -")
            continue
        if req.get("method") in HANDSHAKE:
            peer.answer(req, False)
            continue
        params = req.get("params") if isinstance(req.get("params"), dict) else {}
        args = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
        marker = args.get("soak")
        log(f"recv {marker if isinstance(marker, str) else '-'}")
        if not isinstance(marker, str):
            peer.answer(req, False)
            continue
        fault = str(args.get("fault", "ok"))
        if fault == "die":
            sys.exit(3)
        if fault == "die_partial":
            sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":' + json.dumps(req.get("id")).encode() + b',"result":{"con')
            sys.stdout.buffer.flush()
            sys.exit(1)
        if fault.startswith("slow:"):
            time.sleep(int(fault[5:]) / 1000.0)
        if req.get("id") is None:
            continue
        peer.send({"jsonrpc": "2.0", "id": req["id"],
                   "result": {"content": [{"type": "text", "text": marker}]}})


main()
