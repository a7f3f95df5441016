"""A stdio child that never completes the MCP handshake.

    bad_handshake.py exit|hang|cut

exit: exits at once (status 1), reading nothing. hang: reads stdin and never answers
(exits at EOF). cut: reads one line (the gateway's initialize) and exits 3 without
answering it.
"""

import sys

mode = sys.argv[1]
if mode == "exit":
    sys.exit(1)
if mode == "cut":
    sys.stdin.buffer.readline()
    sys.exit(3)
if mode == "hang":
    for _ in sys.stdin.buffer:
        pass
    sys.exit(0)
sys.exit(f"unknown mode {mode!r}")
