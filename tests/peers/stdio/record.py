"""Records what a real stdio MCP server is sent: starts it as a child and stands between
the gateway and its stdin.

    record.py LOG PIDFILE -- ARGV...

Every start (one per child life) appends the line {"record":"life","pid":PID} to LOG
(PID: the real server's), then every line it forwards to the server's stdin, verbatim,
each appended before it is forwarded. PIDFILE holds the real server's pid (replaced
atomically at each start), so a test can kill the real server itself. The server's
stdout and stderr are its own (inherited): what it prints reaches the gateway unchanged.
When stdin ends, the server's stdin is closed; this wrapper exits with the server's
status when the server ends (128 + N when killed by signal N), whatever stdin does.
"""

import json
import os
import subprocess
import sys
import threading

log_path, pid_path = sys.argv[1], sys.argv[2]
if sys.argv[3] != "--":
    sys.exit("usage: record.py LOG PIDFILE -- ARGV...")
server = subprocess.Popen(sys.argv[4:], stdin=subprocess.PIPE)

with open(pid_path + ".tmp", "w") as f:
    f.write(f"{server.pid}\n")
os.replace(pid_path + ".tmp", pid_path)
log = open(log_path, "ab", buffering=0)
log.write(json.dumps({"record": "life", "pid": server.pid}).encode() + b"\n")


def forward() -> None:
    try:
        for raw in sys.stdin.buffer:
            log.write(raw.rstrip(b"\n") + b"\n")
            server.stdin.write(raw)
            server.stdin.flush()
        server.stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass


threading.Thread(target=forward, daemon=True).start()
code = server.wait()
os._exit(128 - code if code < 0 else code)
