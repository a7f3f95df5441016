"""A handshake-era (legacy) MCP server on the Python SDK 1.x (FastMCP), for the era bridge tests.

    .peers/venv-py1/bin/python tests/peers/era/legacy_server.py --transport stdio --effects FILE
    .peers/venv-py1/bin/python tests/peers/era/legacy_server.py --transport http --port N --effects FILE
    .peers/venv-py1/bin/python tests/peers/era/legacy_server.py --transport http --port N --json-response

It speaks only the `initialize` handshake era (latest revision 2025-11-25). What the SDK
does with 2026-07-28 traffic: `server/discover` (before or after `initialize`) and any
request before `initialize` are answered -32602 "Invalid request parameters" (data "") and
the connection lives on; over HTTP a request without a session id gets 400
{"id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}},
and `MCP-Protocol-Version: 2026-07-28` on a session gets 400 -32600 "Bad Request:
Unsupported protocol version: 2026-07-28. Supported versions: ...".

HTTP is Streamable HTTP on 127.0.0.1:N at /mcp (stateful: sessions, a GET stream, SSE
answers; `--json-response` answers POSTs with application/json, which cannot carry the
server's own requests: `ask`, `sample` then wait until the caller's deadline). Once bound
it prints `listening on 127.0.0.1:N` to stderr. While a call waits on the caller forever
(`--json-response`), SIGTERM does not end the process (uvicorn waits for it): SIGKILL it.

Tools (the effects file, `--effects`, is appended one line at a time, flushed and fsynced,
so a test counts what the server itself executed; without it a temporary file is used):
    effect(label)     appends `label`; answers "effect <label> #<n>", n = lines now in the file
    ask(question)     appends `ask-start`, elicits {name: string} from the caller
                      (elicitation/create on this call's own stream), appends `ask-end`;
                      answers "hello <name>" on accept, "no answer (<action>)" otherwise
    sample(prompt)    sampling/createMessage on this call's own stream; answers the sampled text
    roots()           roots/list as the SDK sends it: with no related request (on HTTP it
                      goes to the GET stream); answers the root URIs joined by newlines
    roots_related()   the same, sent on this call's own stream (related_request_id)
    chatty()          notifications/message at debug, info, warning ("debug line",
                      "info line", "warning line"), regardless of logging/setLevel (which
                      is accepted and stored), then answers "logged"
Resource `data://greeting` ("hello from legacy"); prompt `greet(name)`.
Instructions: "legacy test server". Logs go to stderr at WARNING, one line per record.
"""

import argparse
import logging
import os
import sys
import tempfile

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel, Field


class Name(BaseModel):
    name: str = Field(description="Your name")


class Effects:
    """The effects file: one line per effect, durable before the tool answers."""

    def __init__(self, path: str):
        self.path = path

    def append(self, line: str) -> int:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        with open(self.path, encoding="utf-8") as f:
            return sum(1 for _ in f)


class FirstLine(logging.Filter):
    """Keeps one line per log record: the SDK logs a pydantic dump (30+ lines) for every
    request it cannot parse, e.g. `server/discover`; its first line says what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = record.getMessage().splitlines()[0] if record.getMessage() else "", None
        record.exc_info = record.exc_text = None
        return True


def build_server(args: argparse.Namespace, effects: Effects) -> FastMCP:
    server = FastMCP(
        name="tunnelgate-legacy-peer",
        instructions="legacy test server",
        host="127.0.0.1",
        port=args.port or 8000,
        streamable_http_path="/mcp",
        json_response=args.json_response,
        log_level="WARNING",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(FirstLine())
    levels: dict[int, str] = {}

    @server._mcp_server.set_logging_level()
    async def set_level(level: types.LoggingLevel) -> None:
        # Stored only: chatty() emits every level, so a test sees the bridge's own filtering.
        levels[id(server._mcp_server.request_context.session)] = level

    @server.tool()
    def effect(label: str) -> str:
        """A side effect: appends `label` to the effects file and reports the line count."""
        n = effects.append(label)
        return f"effect {label} #{n}"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Asks the caller for a name (elicitation), mid-call."""
        effects.append("ask-start")
        answer = await ctx.elicit(message=question, schema=Name)
        effects.append("ask-end")
        if answer.action == "accept":
            return f"hello {answer.data.name}"
        return f"no answer ({answer.action})"

    @server.tool()
    async def sample(prompt: str, ctx: Context) -> str:
        """Asks the caller to sample an answer to `prompt` and returns its text."""
        result = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=64,
            related_request_id=ctx.request_id,
        )
        content = result.content
        return content.text if isinstance(content, types.TextContent) else str(content)

    @server.tool()
    async def roots(ctx: Context) -> str:
        """Asks the caller for its roots (as the SDK does: no related request)."""
        listed = await ctx.session.list_roots()
        return "\n".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def roots_related(ctx: Context) -> str:
        """Asks the caller for its roots on this call's own stream."""
        listed = await ctx.session.send_request(
            types.ServerRequest(types.ListRootsRequest()),
            types.ListRootsResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
        return "\n".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def chatty(ctx: Context) -> str:
        """Emits log messages at debug, info and warning, then answers."""
        await ctx.debug("debug line")
        await ctx.info("info line")
        await ctx.warning("warning line")
        return "logged"

    @server.resource("data://greeting")
    def greeting() -> str:
        """A fixed greeting."""
        return "hello from legacy"

    @server.prompt()
    def greet(name: str) -> str:
        """Greets `name`."""
        return f"Please greet {name} warmly."

    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--effects", help="the effects file (default: a new temporary file)")
    args = parser.parse_args()
    if args.transport == "http" and args.port is None:
        parser.error("--transport http needs --port")
    path = args.effects
    if path is None:
        fd, path = tempfile.mkstemp(prefix="legacy-effects-")
        os.close(fd)
    server = build_server(args, Effects(path))
    if args.transport == "stdio":
        server.run("stdio")
        return 0
    serve_http(server, args.port)
    return 0


def serve_http(server: FastMCP, port: int) -> None:
    """Streamable HTTP with the socket bound here first: a taken port fails at once (exit 1)."""
    import socket

    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        print(f"cannot bind 127.0.0.1:{port}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    sock.listen(128)
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    sys.exit(main())
