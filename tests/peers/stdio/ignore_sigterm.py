"""Ignores SIGTERM (recording that it got one) and stdin EOF: only SIGKILL stops it.
With GRANDCHILD_PIDFILE, first forks a grandchild in its own process group that ignores
SIGTERM too (its pid in that file): only a SIGKILL to the group stops both.

    ignore_sigterm.py PIDFILE TERMFILE [GRANDCHILD_PIDFILE]
"""

import os
import signal
import sys
import time

pidfile, termfile = sys.argv[1], sys.argv[2]
grandchild_pidfile = sys.argv[3] if len(sys.argv) > 3 else None


def write_pid(path):
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def sleep_at_most(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


if grandchild_pidfile and os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_pid(grandchild_pidfile)
    sleep_at_most(30)
    os._exit(0)


def on_term(signum, frame):
    with open(termfile, "a") as f:
        f.write("term\n")


signal.signal(signal.SIGTERM, on_term)
write_pid(pidfile)
while sys.stdin.buffer.readline():
    pass
sleep_at_most(30)
