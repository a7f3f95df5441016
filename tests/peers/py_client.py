"""A real MCP client (Python SDK `mcp`, Streamable HTTP) for black-box tests.

    .peers/venv/bin/python tests/peers/py_client.py --url URL [--timeout S] [--header K:V]... ACTION...

Actions run in order after `initialize`:
    --list-tools              tools/list
    --call NAME JSON_ARGS     tools/call (progress notifications are collected)
    --ping                    ping

Answers to the server's own requests (declaring the capability only when given):
    --sampling-reply TEXT     sampling/createMessage is answered with TEXT
    --elicit-accept JSON      elicitation/create is accepted with the JSON object
    --never-reply             both are declared but never answered (the call hangs)

Prints ONE JSON line on stdout:
    {"ok": true, "protocol_version": "...", "server_name": "...",
     "results": [{"action": "list_tools", "tools": ["echo", ...]},
                 {"action": "call", "tool": "echo", "is_error": false, "texts": ["Echo: hi"],
                  "structured": {...} | null, "progress": [[1.0, 3.0], ...]},
                 {"action": "call", "tool": "x", "error": {"code": -32602, "message": "..."}},
                 {"action": "ping"}]}
A JSON-RPC error answer to a call is a result (`error`), not a failure. Anything else
(connect, protocol, timeout) exits 1 with one clear line on stderr.
"""

import argparse
import json
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CreateMessageResult, ElicitResult, TextContent


class AppendAction(argparse.Action):
    """Collect every action, in command-line order, into `namespace.actions`."""

    def __call__(self, parser, namespace, values, option_string=None):
        actions = getattr(namespace, "actions", None) or []
        if self.dest == "call":
            name, raw = values
            try:
                arguments = json.loads(raw)
            except json.JSONDecodeError as err:
                parser.error(f"--call {name}: arguments are not JSON: {err}")
            if not isinstance(arguments, dict):
                parser.error(f"--call {name}: arguments must be a JSON object")
            actions.append(("call", name, arguments))
        else:
            actions.append((self.dest, None, None))
        namespace.actions = actions


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--timeout", type=float, default=20.0, help="whole run, seconds")
    parser.add_argument("--header", action="append", default=[], help="extra HTTP header K:V")
    parser.add_argument("--list-tools", dest="list_tools", nargs=0, action=AppendAction)
    parser.add_argument("--ping", dest="ping", nargs=0, action=AppendAction)
    parser.add_argument("--call", dest="call", nargs=2, metavar=("NAME", "JSON_ARGS"), action=AppendAction)
    parser.add_argument("--sampling-reply", dest="sampling_reply")
    parser.add_argument("--elicit-accept", dest="elicit_accept", type=json.loads)
    parser.add_argument("--never-reply", dest="never_reply", action="store_true")
    parser.set_defaults(actions=[])
    args = parser.parse_args(argv)
    headers = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            parser.error(f"--header expects K:V, got {header!r}")
        headers[name.strip()] = value.strip()
    args.headers = headers
    return args


async def run(args):
    async with create_mcp_http_client(headers=args.headers) as http:
        async with streamable_http_client(args.url, http_client=http) as (read, write):
            async with ClientSession(read, write, **callbacks(args)) as session:
                init = await session.initialize()
                out = {
                    "ok": True,
                    "protocol_version": init.protocol_version,
                    "server_name": init.server_info.name,
                    "results": [],
                }
                for kind, name, arguments in args.actions:
                    out["results"].append(await perform(session, kind, name, arguments))
                return out


def callbacks(args):
    """Session callbacks for the server's requests, only for the options given."""
    out = {}

    async def never(_context, _params):
        await anyio.sleep_forever()

    if args.never_reply:
        out["sampling_callback"] = never
        out["elicitation_callback"] = never
    if args.sampling_reply is not None:

        async def sample(_context, _params):
            return CreateMessageResult(
                role="assistant",
                content=TextContent(type="text", text=args.sampling_reply),
                model="tunnelgate-test-model",
                stop_reason="endTurn",
            )

        out["sampling_callback"] = sample
    if args.elicit_accept is not None:

        async def elicit(_context, _params):
            return ElicitResult(action="accept", content=args.elicit_accept)

        out["elicitation_callback"] = elicit
    return out


async def perform(session, kind, name, arguments):
    if kind == "list_tools":
        listed = await session.list_tools()
        return {"action": "list_tools", "tools": [tool.name for tool in listed.tools]}
    if kind == "ping":
        await session.send_ping()
        return {"action": "ping"}
    progress = []

    async def on_progress(value, total, _message):
        progress.append([value, total])

    try:
        result = await session.call_tool(name, arguments, progress_callback=on_progress)
    except MCPError as err:
        return {"action": "call", "tool": name, "error": {"code": err.code, "message": err.message}}
    return {
        "action": "call",
        "tool": name,
        "is_error": bool(result.is_error),
        "texts": [block.text for block in result.content if getattr(block, "type", None) == "text"],
        "structured": result.structured_content,
        "progress": progress,
    }


def describe(err):
    """One line for a failure, unwrapping task-group exception groups."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in err.exceptions)
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    async def bounded():
        with anyio.fail_after(args.timeout):
            return await run(args)

    try:
        out = anyio.run(bounded)
    except TimeoutError:
        print(f"py_client: timed out after {args.timeout:g}s against {args.url}", file=sys.stderr)
        return 1
    except BaseException as err:  # noqa: BLE001 - one clear line, then non-zero
        if isinstance(err, KeyboardInterrupt):
            raise
        print(f"py_client: failed against {args.url}: {describe(err)}", file=sys.stderr)
        return 1
    print(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
