"""Ignores SIGTERM (recording that it got one) and stdin EOF: only SIGKILL stops it.

    ignore_sigterm.py PIDFILE TERMFILE
"""

import os
import signal
import sys
import time

pidfile, termfile = sys.argv[1], sys.argv[2]


def on_term(signum, frame):
    with open(termfile, "a") as f:
        f.write("term\n")


signal.signal(signal.SIGTERM, on_term)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
while sys.stdin.buffer.readline():
    pass
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    time.sleep(0.05)
