"""A real MCP server (Python SDK `mcp`, MCPServer) for black-box tests.

Tools: echo(message), add(a, b), progress(steps) (one progress notification per step),
sample(prompt) (asks the client for sampling/createMessage mid-call) and
confirm(question) (asks the client for elicitation/create mid-call) and announce()
(publishes a tools list-changed event to `subscriptions/listen` streams, 2026-07-28)
and greet(name) (the name is elicited: at 2026-07-28 an input-required result),
record_marker(marker) (with --record FILE only: appends the marker to FILE, one line per
call served, so a test can count what the server itself executed),
fail(message) (the tool raises: a result with isError true), pause(ms) (stdio modes
only: answers "paused MS ms" after MS milliseconds), headers_seen() (the HTTP request
headers this very request carried), and trace_seen() (the W3C
trace context this very request carried: its `traceparent`/`tracestate` HTTP headers,
its `params._meta` keys and trace fields, and the parent the SDK's own OpenTelemetry
middleware extracted from `_meta`).
Serves Streamable HTTP on 127.0.0.1 (or the test's own `--host`, e.g. an address in a
network namespace of the test's own), at /mcp, or on a unix domain socket (`--uds`), or
stdio.

    .peers/venv/bin/python tests/peers/py_server.py --port N --mode json|sse|stateless
    .peers/venv/bin/python tests/peers/py_server.py --port N --mode stateless --record /tmp/served
    .peers/venv/bin/python tests/peers/py_server.py --host 10.213.0.2 --port N --mode json
    .peers/venv/bin/python tests/peers/py_server.py --uds /tmp/x.sock --allowed-host mcp.internal
    .peers/venv/bin/python tests/peers/py_server.py --mode stdio|stdio-modern

On a unix socket the server accepts only requests whose `Host` is `--allowed-host`
(421 otherwise): a test reads from that which host its client sent.

With --certfile/--keyfile/--ca-certs it serves HTTPS and REQUIRES a client certificate
issued by a CA in --ca-certs (with --certfile/--keyfile and no --ca-certs it serves HTTPS
asking for no client certificate); once bound it prints `listening on 127.0.0.1:PORT` to
stderr, and each accepted connection prints one stderr line
`peer certificate: CN=<subject common name>` (the server's view of what was presented:
`CN=` when none was), and every response closes its connection (so each request makes a
new handshake).

Modes: `json` answers requests with application/json; `sse` (the SDK default) answers
with text/event-stream; `stateless` answers with JSON and issues no session id; `stdio`
serves one client on stdin/stdout (in the era its first request opens, as `Server.run`
does); `stdio-modern` serves stdin/stdout in the 2026-07-28 era only (the SDK's modern
serving loop): `initialize` is refused with -32022 and every request carries its own
`_meta` envelope.
Logs go to stderr at WARNING: no payloads, no secrets.
"""

import argparse
import sys

import anyio
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import SamplingMessage, TextContent
from opentelemetry import trace
from pydantic import BaseModel


class Confirmation(BaseModel):
    ok: bool


class Name(BaseModel):
    name: str


async def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def build_server(stdio: bool = False, record: str | None = None) -> MCPServer:
    server = MCPServer(name="tunnelgate-py-peer", version="1.0.0", log_level="WARNING")

    if record is not None:
        served = open(record, "a", buffering=1)

        @server.tool()
        def record_marker(marker: str) -> str:
            """Append `marker` to the --record file (one line per call served), then answer."""
            served.write(marker + "\n")
            return f"recorded {marker}"

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

    @server.tool()
    async def sample(prompt: str, ctx: Context) -> str:
        """Ask the client to sample an answer to `prompt`, then return it."""
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=32,
            # On this call's own response stream (a tunnel carries no standalone GET stream).
            related_request_id=ctx.request_id,
        )
        return f"sampled: {result.content.text}"

    @server.tool()
    async def greet(name: Annotated[Name, Resolve(ask_name)]) -> str:
        """Greet the caller by the name it gives when asked (2026-07-28: input required)."""
        return f"hello {name.name}"

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Tell every subscriptions/listen stream that the tool list changed."""
        await ctx.notify_tools_changed()
        return "announced"

    @server.tool()
    async def confirm(question: str, ctx: Context) -> str:
        """Ask the client to confirm, then report its answer."""
        answer = await ctx.elicit(question, Confirmation)
        if answer.action == "accept":
            return f"elicited: accept ok={answer.data.ok}"
        return f"elicited: {answer.action}"

    if stdio:

        @server.tool()
        async def pause(ms: int) -> str:
            """Answer after `ms` milliseconds."""
            await anyio.sleep(ms / 1000.0)
            return f"paused {ms} ms"

    @server.tool()
    def fail(message: str) -> str:
        """Always fails: the caller gets a result with isError true."""
        raise ToolError(f"failed: {message}")

    @server.tool()
    def headers_seen(ctx: Context) -> dict:
        """The HTTP request headers this very request carried (names lowercased)."""
        headers = getattr(ctx.request_context.request, "headers", None)
        return {name.lower(): value for name, value in headers.items()} if headers is not None else {}

    @server.tool()
    def trace_seen(ctx: Context) -> dict:
        """The trace context this request carried, as the server received it."""
        request_context = ctx.request_context
        meta = dict(request_context.meta or {})
        headers = getattr(request_context.request, "headers", None)
        parent = trace.get_current_span().get_span_context()
        return {
            "header_traceparent": headers.get("traceparent") if headers is not None else None,
            "header_tracestate": headers.get("tracestate") if headers is not None else None,
            "meta_keys": sorted(meta.keys()),
            "meta_traceparent": meta.get("traceparent"),
            "meta_tracestate": meta.get("tracestate"),
            "sdk_parent": {
                "trace_id": format(parent.trace_id, "032x"),
                "span_id": format(parent.span_id, "016x"),
            }
            if parent.is_valid
            else None,
        }

    return server


async def serve_modern_stdio(server: MCPServer) -> None:
    """stdin/stdout in the 2026-07-28 era only, as `Server.run` serves a connection."""
    from mcp.server.runner import _serve_modern_stream
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        async with lowlevel.lifespan(lowlevel) as lifespan_state:
            try:
                await _serve_modern_stream(
                    lowlevel, read_stream, write_stream, lifespan_state=lifespan_state, raise_exceptions=False
                )
            finally:
                await write_stream.aclose()


def serve_uds(server: MCPServer, args: argparse.Namespace) -> None:
    """Streamable HTTP on a unix domain socket, accepting only `--allowed-host` as Host."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    if not args.allowed_host:
        raise SystemExit("--uds needs --allowed-host")
    app = server.streamable_http_app(
        json_response=args.mode in ("json", "stateless"),
        stateless_http=args.mode == "stateless",
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[args.allowed_host],
            allowed_origins=[],
        ),
    )
    uvicorn.run(app, uds=args.uds, log_level="warning")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--uds")
    parser.add_argument("--allowed-host")
    parser.add_argument("--mode", choices=["json", "sse", "stateless", "stdio", "stdio-modern"], default="json")
    parser.add_argument("--certfile", help="server certificate (PEM): serve HTTPS")
    parser.add_argument("--keyfile", help="the server certificate's key (PEM)")
    parser.add_argument(
        "--ca-certs", help="CAs a client certificate must chain to (then required; without it none is asked for)"
    )
    parser.add_argument("--record", help="adds the tool record_marker, which appends each marker to this file")
    args = parser.parse_args()

    server = build_server(stdio=args.mode.startswith("stdio"), record=args.record)
    if args.mode == "stdio":
        server.run("stdio")
        return 0
    if args.mode == "stdio-modern":
        anyio.run(serve_modern_stdio, server)
        return 0
    if args.uds is not None:
        serve_uds(server, args)
        return 0
    if args.port is None:
        parser.error("--port is required unless --mode stdio, stdio-modern or --uds")
    if args.certfile:
        serve_tls(server, args)
        return 0
    server.run(
        "streamable-http",
        host=args.host,
        port=args.port,
        json_response=args.mode in ("json", "stateless"),
        stateless_http=args.mode == "stateless",
    )
    return 0


def serve_tls(server: MCPServer, args: argparse.Namespace) -> None:
    """HTTPS with client certificates required when --ca-certs is given, none asked for
    otherwise (uvicorn's ssl options), logging the subject of each connection's client
    certificate."""
    import ssl

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class PeerCertLogging(H11Protocol):
        def connection_made(self, transport):  # type: ignore[override]
            ssl_object = transport.get_extra_info("ssl_object")
            if ssl_object is not None:
                cert = ssl_object.getpeercert() or {}
                subject = dict(pair for rdn in cert.get("subject", ()) for pair in rdn)
                print(f"peer certificate: CN={subject.get('commonName', '')}", file=sys.stderr, flush=True)
            super().connection_made(transport)

    app = server.streamable_http_app(
        json_response=args.mode in ("json", "stateless"), stateless_http=args.mode == "stateless"
    )

    async def closing(scope, receive, send):
        # Every response closes its connection: each request makes a new handshake, so a
        # test sees which certificate each one presented.
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def send_closing(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, send_closing)

    # The socket is bound here, before uvicorn starts, so a port taken by another process
    # fails this process at once (exit 1) instead of leaving a test talking to a stranger;
    # the line below is what a test waits for.
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as e:
        print(f"cannot bind 127.0.0.1:{args.port}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    sock.listen(128)
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        closing,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        http=PeerCertLogging,
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        ssl_ca_certs=args.ca_certs,
        ssl_cert_reqs=ssl.CERT_REQUIRED if args.ca_certs else ssl.CERT_NONE,
    )
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    sys.exit(main())
