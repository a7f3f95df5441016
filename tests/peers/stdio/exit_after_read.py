"""Reads one request and exits without answering, the first time only (MARKER file);
later generations behave like echo.py.

    exit_after_read.py MARKER
"""

import sys

import peer

if peer.once(sys.argv[1]):
    sys.stdin.buffer.readline()
    sys.exit(3)
peer.serve()
