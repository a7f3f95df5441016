"""Reads one request and exits without answering, the first time only (MARKER file);
later generations behave like echo.py. With SPAWNS, every start appends its pid there
as one line, so a test can count the generations that were spawned.

    exit_after_read.py MARKER [SPAWNS]
"""

import os
import sys

import peer

if len(sys.argv) > 2:
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\n")
if peer.once(sys.argv[1]):
    sys.stdin.buffer.readline()
    sys.exit(3)
peer.serve()
