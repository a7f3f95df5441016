"""A handshake-era stdio MCP server on the Python SDK 1.9.3, run by .peers/venv-py193.

    old_server.py --effects FILE

That release raises out of its receive loop on a request it cannot validate (an unknown
method such as `server/discover`, or a request before initialization), so the process
dies: the probe hazard of the era bridge (fixed upstream in 1.9.4). One tool:
    effect(label)   appends `label` to FILE (flushed, fsynced); answers "effect <label> #<n>"
"""

import argparse
import os

from mcp.server.fastmcp import FastMCP

parser = argparse.ArgumentParser()
parser.add_argument("--effects", required=True)
args = parser.parse_args()

mcp = FastMCP("tunnelgate-old-peer")


@mcp.tool()
def effect(label: str) -> str:
    """Append one line to the effects file (a side effect a test can count)."""
    with open(args.effects, "a", encoding="utf-8") as f:
        f.write(label + "\n")
        f.flush()
        os.fsync(f.fileno())
    with open(args.effects, encoding="utf-8") as f:
        n = sum(1 for _ in f)
    return f"effect {label} #{n}"


mcp.run()
