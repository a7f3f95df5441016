"""A real MCP server (Python SDK `mcp`, MCPServer) for black-box tests.

Tools: echo(message), add(a, b), progress(steps) (one progress notification per step).
Serves Streamable HTTP on 127.0.0.1 only, at /mcp.

    .peers/venv/bin/python tests/peers/py_server.py --port N --mode json|sse|stateless

Modes: `json` answers requests with application/json; `sse` (the SDK default) answers
with text/event-stream; `stateless` answers with JSON and issues no session id.
Logs go to stderr at WARNING: no payloads, no secrets.
"""

import argparse
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer


def build_server() -> MCPServer:
    server = MCPServer(name="tunnelgate-py-peer", version="1.0.0", log_level="WARNING")

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return f"Echo: {message}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def progress(steps: int, ctx: Context) -> str:
        """Report `steps` progress notifications, then answer."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}/{steps}")
            await anyio.sleep(0.01)
        return f"done {steps} steps"

    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["json", "sse", "stateless"], default="json")
    args = parser.parse_args()

    server = build_server()
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=args.port,
        json_response=args.mode in ("json", "stateless"),
        stateless_http=args.mode == "stateless",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
