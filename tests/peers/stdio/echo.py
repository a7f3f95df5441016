"""Well-behaved stdio MCP server.

    echo.py [--log FILE] [--env-out FILE] [--garbage] [--modern] [--name NAME]

--log appends every received line to FILE; --env-out writes the environment as JSON to
FILE at startup; --garbage prints non-JSON lines on stdout before every answer; --modern
refuses initialize as a 2026-07-28 server does (-32022) and answers everything else; --name
is the serverInfo name initialize answers with.
"""

import json
import os
import sys

import peer

env_out = peer.arg("--env-out")
if env_out:
    with open(env_out + ".tmp", "w") as f:
        json.dump(dict(os.environ), f)
    os.replace(env_out + ".tmp", env_out)
sys.stderr.write("echo peer ready token=abc123\n")
sys.stderr.flush()
peer.serve(log_path=peer.arg("--log"), garbage=peer.flag("--garbage"))
