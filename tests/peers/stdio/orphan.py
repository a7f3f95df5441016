"""The first time (MARKER file): leaves a grandchild in its own session holding the
inherited stdout/stderr (its pid in PIDFILE), then exits. Later generations behave like
echo.py. The grandchild exits by itself after 20 s at the latest.

    orphan.py MARKER PIDFILE
"""

import os
import sys
import time

import peer

marker, pidfile = sys.argv[1], sys.argv[2]
if peer.once(marker):
    if os.fork() == 0:
        os.setsid()
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
        time.sleep(20)
        os._exit(0)
    sys.exit(0)
peer.serve()
