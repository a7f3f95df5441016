"""Reads one request and exits without answering, the first time only (MARKER file);
later generations behave like echo.py. The handshake does not count: an `initialize` is
answered and `notifications/initialized` passes, so the request it dies on is the first
caller's. With SPAWNS, every start appends its pid there as one line, so a test can count
the generations that were spawned.

    exit_after_read.py MARKER [SPAWNS]
"""

import json
import os
import sys

import peer

if len(sys.argv) > 2:
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\n")
if peer.once(sys.argv[1]):
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            sys.exit(0)
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        method = msg.get("method") if isinstance(msg, dict) else None
        if method == "initialize":
            peer.answer(msg, False)
        elif method != "notifications/initialized":
            sys.exit(3)
peer.serve()
