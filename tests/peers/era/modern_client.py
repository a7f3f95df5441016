"""A real MCP client of both eras (Python SDK `mcp` 2.x, `mcp.Client`) for the era bridge tests.

    .peers/venv/bin/python tests/peers/era/modern_client.py --url URL [--mode M] [--timeout S]
        [--header K:V]... [--log-level LEVEL] [answers...] ACTION...
    .peers/venv/bin/python tests/peers/era/modern_client.py --stdio "COMMAND ARGS" ...

Modes (`--mode`, the SDK's `Client(mode=)`): `2026-07-28` (default: pinned, a modern-only
caller: no probe, no handshake, every request carries the `_meta` envelope and, on HTTP,
the MCP-Protocol-Version / Mcp-Method / Mcp-Name headers), `auto` (probes `server/discover`,
falls back to `initialize`), `legacy` (the `initialize` handshake only).

Actions run in order after connecting:
    --discover                         the negotiated era and identity; in a modern era it also
                                       sends `server/discover` itself and prints its raw result
    --list-tools | --list-resources | --list-prompts
    --read-resource URI
    --get-prompt NAME JSON_ARGS
    --call NAME JSON_ARGS              tools/call; input requests (legacy: the server's own
                                       requests; 2026-07-28: `input_required` rounds, driven by
                                       the SDK) are answered from the options below
    --raw-input-required NAME JSON_ARGS  one tools/call that may answer `input_required`:
                                       prints the raw result (requestState, inputRequests)
    --continue NAME JSON_ARGS INPUT_RESPONSES_JSON REQUEST_STATE
                                       one tools/call retry carrying `inputResponses` and
                                       `requestState` exactly as given (`-` or `null` as
                                       INPUT_RESPONSES_JSON omits it; so does `-` as
                                       REQUEST_STATE); prints the raw result or the error

Answers to input requests (each capability is declared only when its answer is given):
    --elicit-accept JSON | --elicit-decline | --elicit-cancel
    --sampling-reply TEXT
    --roots URI[,URI]
Options:
    --log-level LEVEL    opts in to log messages: 2026-07-28 stamps
                         `io.modelcontextprotocol/logLevel` on every request; a handshake
                         session sends `logging/setLevel` once when the server has `logging`
    --header K:V         an extra HTTP header on every request

Prints ONE JSON line on stdout:
    {"ok": true, "mode": "2026-07-28", "protocol_version": "2026-07-28",
     "server_name": null | "...", "results": [...]}
Each result names its action; results of requests carry `wire`: the raw result's
`resultType`, `ttlMs`, `cacheScope` and `_meta`, each only when present on the wire (the
SDK validates and parses results; these are read from the raw JSON before it does), `logs`
(notifications/message received during that action: level, logger, data) and `asked`
(input requests the client answered during it: method and params). A `--call` also has
`rounds` (the `wire` of each tools/call answer, input_required ones included). Every
result has `sent`: the methods of the requests the SDK sent for it, in order (the SDK may
send tools/list by itself first, to validate a tool's output schema).
A JSON-RPC error answer is a result (`error`: code, message, data), not a failure. Anything
else (connect, a result the SDK rejects as invalid, timeout) exits 1 with one clear line on
stderr.
"""

import argparse
import contextlib
import copy
import json
import logging
import shlex
import sys
import warnings

import anyio
import mcp.types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

WIRE_KEYS = ("resultType", "ttlMs", "cacheScope", "_meta")
ACTION_METHODS = {
    "discover": "server/discover",
    "list_tools": "tools/list",
    "list_resources": "resources/list",
    "list_prompts": "prompts/list",
    "read_resource": "resources/read",
    "get_prompt": "prompts/get",
    "call": "tools/call",
    "raw_input_required": "tools/call",
    "continue": "tools/call",
}

# The SDK's own warnings (e.g. "Tool X not listed by server, cannot validate any structured
# content") would add stderr lines to a successful run; its errors still show.
logging.basicConfig(level=logging.ERROR, format="modern_client: sdk: %(message)s")
# Deprecated-in-2026 features (logging/setLevel, roots) are used on purpose: stderr stays one line.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def json_object(text, what):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{what} is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{what} must be a JSON object")
    return value


class AppendAction(argparse.Action):
    """Collect every action, in command-line order, into `namespace.actions`."""

    def __call__(self, parser, namespace, values, option_string=None):
        actions = getattr(namespace, "actions", None) or []
        values = list(values) if isinstance(values, list) else ([] if values is None else [values])
        try:
            if self.dest in ("call", "get_prompt", "raw_input_required"):
                values[1] = json_object(values[1], f"{option_string} {values[0]} arguments")
            elif self.dest == "continue":
                values[1] = json_object(values[1], f"{option_string} {values[0]} arguments")
                if values[2] in ("-", "null"):
                    values[2] = None
                else:
                    values[2] = json_object(values[2], f"{option_string} {values[0]} input responses")
                if values[3] == "-":
                    values[3] = None
        except argparse.ArgumentTypeError as err:
            parser.error(str(err))
        actions.append((self.dest, values))
        namespace.actions = actions


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="Streamable HTTP endpoint")
    target.add_argument("--stdio", help="a server command line to launch and talk to over stdio")
    parser.add_argument("--mode", default="2026-07-28", help="2026-07-28 | auto | legacy")
    parser.add_argument("--timeout", type=float, default=20.0, help="whole run, seconds")
    parser.add_argument("--header", action="append", default=[], help="extra HTTP header K:V")
    parser.add_argument("--log-level", dest="log_level")
    for flag in ("--discover", "--list-tools", "--list-resources", "--list-prompts"):
        parser.add_argument(flag, dest=flag[2:].replace("-", "_"), nargs=0, action=AppendAction)
    parser.add_argument("--read-resource", dest="read_resource", nargs=1, metavar="URI", action=AppendAction)
    parser.add_argument("--get-prompt", dest="get_prompt", nargs=2, metavar=("NAME", "JSON_ARGS"), action=AppendAction)
    parser.add_argument("--call", dest="call", nargs=2, metavar=("NAME", "JSON_ARGS"), action=AppendAction)
    parser.add_argument(
        "--raw-input-required",
        dest="raw_input_required",
        nargs=2,
        metavar=("NAME", "JSON_ARGS"),
        action=AppendAction,
    )
    parser.add_argument(
        "--continue",
        dest="continue",
        nargs=4,
        metavar=("NAME", "JSON_ARGS", "INPUT_RESPONSES_JSON", "REQUEST_STATE"),
        action=AppendAction,
    )
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument("--elicit-accept", dest="elicit_accept", type=lambda t: json_object(t, "--elicit-accept"))
    answers.add_argument("--elicit-decline", dest="elicit_decline", action="store_true")
    answers.add_argument("--elicit-cancel", dest="elicit_cancel", action="store_true")
    parser.add_argument("--sampling-reply", dest="sampling_reply")
    parser.add_argument("--roots", dest="roots", help="comma-separated root URIs")
    parser.set_defaults(actions=[])
    args = parser.parse_args(argv)
    headers = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            parser.error(f"--header expects K:V, got {header!r}")
        headers[name.strip()] = value.strip()
    args.headers = headers
    if args.mode not in ("legacy", "auto") and args.mode not in MODERN_PROTOCOL_VERSIONS:
        parser.error(f"--mode must be legacy, auto or one of {list(MODERN_PROTOCOL_VERSIONS)}, got {args.mode!r}")
    return args


class Recorder:
    """What arrived during the current action: raw results, log messages, input requests."""

    def __init__(self):
        self.raw = []  # (method, raw result dict, or None for an error) in arrival order
        self.logs = []
        self.asked = []

    def take(self):
        taken = (self.raw, self.logs, self.asked)
        self.raw, self.logs, self.asked = [], [], []
        return taken


def wire_of(raw):
    return {key: raw[key] for key in WIRE_KEYS if key in raw}


def error_of(err):
    out = {"code": err.code, "message": err.message}
    if err.data is not None:
        out["data"] = err.data
    return out


def callbacks(args, rec):
    """Client callbacks for input requests, only for the answers given (capabilities follow)."""
    out = {}

    async def on_log(params):
        rec.logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    out["logging_callback"] = on_log
    if args.elicit_accept is not None or args.elicit_decline or args.elicit_cancel:

        async def elicit(_context, params):
            rec.asked.append({"method": "elicitation/create", "params": dump(params)})
            if args.elicit_accept is not None:
                return types.ElicitResult(action="accept", content=args.elicit_accept)
            return types.ElicitResult(action="decline" if args.elicit_decline else "cancel")

        out["elicitation_callback"] = elicit
    if args.sampling_reply is not None:

        async def sample(_context, params):
            rec.asked.append({"method": "sampling/createMessage", "params": dump(params)})
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=args.sampling_reply),
                model="tunnelgate-test-model",
                stop_reason="endTurn",
            )

        out["sampling_callback"] = sample
    if args.roots is not None:
        uris = [uri for uri in args.roots.split(",") if uri]

        async def roots(_context):
            rec.asked.append({"method": "roots/list", "params": None})
            return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in uris])

        out["list_roots_callback"] = roots
    return out


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True) if model is not None else None


def record_raw(client, rec):
    """Keep a copy of every raw result the dispatcher returns, before the SDK validates it."""
    dispatcher = client.session._dispatcher
    inner = dispatcher.send_raw_request

    async def send_raw_request(method, params, opts=None, **kwargs):
        try:
            raw = await inner(method, params, opts, **kwargs)
        except MCPError:
            rec.raw.append((method, None))
            raise
        rec.raw.append((method, copy.deepcopy(raw)))
        return raw

    dispatcher.send_raw_request = send_raw_request


@contextlib.asynccontextmanager
async def http_transport(url, headers):
    """Streamable HTTP with the extra headers, closing its own HTTP client."""
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def transport(args):
    if args.stdio is not None:
        argv = shlex.split(args.stdio)
        return StdioServerParameters(command=argv[0], args=argv[1:])
    return http_transport(args.url, args.headers)


async def run(args):
    rec = Recorder()
    client = Client(
        transport(args),
        mode=args.mode,
        log_level=args.log_level,
        cache=None,  # every list reaches the server
        **callbacks(args, rec),
    )
    async with client:
        record_raw(client, rec)
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        out = {
            "ok": True,
            "mode": args.mode,
            "protocol_version": client.protocol_version,
            "server_name": client.server_info.name if client.server_info else None,
            "results": [],
        }
        rec.take()
        if args.log_level is not None and not modern:
            caps = client.server_capabilities
            if caps is not None and caps.logging is not None:
                await client.session.set_logging_level(args.log_level)
                out["set_level_sent"] = True
            rec.take()
        for kind, values in args.actions:
            result = await perform(client, kind, values, modern, rec)
            raws, logs, asked = rec.take()
            own = [raw for method, raw in raws if method == ACTION_METHODS.get(kind) and raw is not None]
            if "wire" not in result and own:
                result["wire"] = wire_of(own[-1])
            if kind == "call":
                result["rounds"] = [wire_of(raw) for raw in own]
            # Every request the SDK sent for this action, in order (it may list tools by itself
            # to validate a tool's output schema, or re-list after -32020).
            result["sent"] = [method for method, _ in raws]
            result["logs"] = logs
            result["asked"] = asked
            out["results"].append(result)
        return out


async def perform(client, kind, values, modern, rec):
    session = client.session
    try:
        if kind == "discover":
            return await discover(client, modern)
        if kind == "list_tools":
            listed = await client.list_tools()
            return {"action": "list_tools", "tools": [tool.name for tool in listed.tools]}
        if kind == "list_resources":
            listed = await client.list_resources()
            return {"action": "list_resources", "resources": [str(r.uri) for r in listed.resources]}
        if kind == "list_prompts":
            listed = await client.list_prompts()
            return {"action": "list_prompts", "prompts": [p.name for p in listed.prompts]}
        if kind == "read_resource":
            (uri,) = values
            read = await client.read_resource(uri)
            texts = [c.text for c in read.contents if getattr(c, "text", None) is not None]
            return {"action": "read_resource", "uri": uri, "texts": texts}
        if kind == "get_prompt":
            name, arguments = values
            got = await client.get_prompt(name, arguments)
            messages = [
                {"role": m.role, "text": getattr(m.content, "text", None)} for m in got.messages
            ]
            return {"action": "get_prompt", "prompt": name, "messages": messages}
        if kind == "call":
            return await call(client, *values)
        if kind == "raw_input_required":
            name, arguments = values
            await session.call_tool(name, arguments, allow_input_required=True)
            # The raw JSON as received (recorded before parsing), so a test can replay it.
            raw = next(raw for method, raw in reversed(rec.raw) if method == "tools/call" and raw is not None)
            return {"action": "raw_input_required", "tool": name, "result": raw}
        if kind == "continue":
            return await continue_call(client, *values)
    except MCPError as err:
        return {"action": kind, "name": values[0] if values else None, "error": error_of(err)}
    raise AssertionError(kind)


async def call(client, name, arguments):
    progress = []

    async def on_progress(value, total, _message):
        progress.append([value, total])

    result = await client.call_tool(name, arguments, progress_callback=on_progress)
    return {
        "action": "call",
        "tool": name,
        "is_error": bool(result.is_error),
        "texts": [block.text for block in result.content if getattr(block, "type", None) == "text"],
        "structured": result.structured_content,
        "progress": progress,
    }


async def discover(client, modern):
    info = client.server_info
    out = {
        "action": "discover",
        "protocol_version": client.protocol_version,
        "server_name": info.name if info else None,
        "server_version": info.version if info else None,
        "instructions": client.instructions,
        "capabilities": dump(client.server_capabilities),
    }
    if not modern:
        out["initialize"] = dump(client.session.initialize_result)
        return out
    # Pinned mode never sends server/discover by itself: ask, and show the raw answer.
    try:
        raw = await client.session.send_discover(client.protocol_version)
    except MCPError as err:
        out["discover_error"] = error_of(err)
        return out
    out["discover"] = raw
    parsed = types.DiscoverResult.model_validate(raw)
    stamp = (parsed.meta or {}).get("io.modelcontextprotocol/serverInfo") or {}
    out["server_name"] = stamp.get("name")
    out["server_version"] = stamp.get("version")
    out["instructions"] = parsed.instructions
    out["capabilities"] = dump(parsed.capabilities)
    out["supported_versions"] = parsed.supported_versions
    out["wire"] = wire_of(raw)
    return out


async def continue_call(client, name, arguments, input_responses, request_state):
    """One tools/call carrying inputResponses/requestState verbatim, stamped as the session
    stamps every request (envelope, headers); the raw result or error, unparsed."""
    session = client.session
    params = {"name": name, "arguments": arguments}
    if input_responses is not None:
        params["inputResponses"] = input_responses
    if request_state is not None:
        params["requestState"] = request_state
    data = {"method": "tools/call", "params": params}
    opts = {}
    session._stamp(data, opts)
    try:
        raw = await session._dispatcher.send_raw_request("tools/call", data["params"], opts)
    except MCPError as err:
        return {"action": "continue", "tool": name, "error": error_of(err)}
    return {"action": "continue", "tool": name, "result": raw, "wire": wire_of(raw)}


def describe(err):
    """One line for a failure, unwrapping task-group exception groups."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in err.exceptions)
    if isinstance(err, ValidationError):
        problems = ", ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:6]
        )
        return f"invalid result ({err.error_count()} problems: {problems})"
    if isinstance(err, MCPError):
        return f"MCPError {err.code}: {err.message}" + (f" data={json.dumps(err.data)}" if err.data is not None else "")
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    target = args.url if args.url is not None else f"stdio {args.stdio}"
    captured = {}

    async def bounded():
        with anyio.fail_after(args.timeout):
            captured["out"] = await run(args)

    try:
        anyio.run(bounded)
    except TimeoutError:
        print(f"modern_client: timed out after {args.timeout:g}s against {target}", file=sys.stderr)
        return 1
    except BaseException as err:  # noqa: BLE001 - one clear line, then non-zero
        if isinstance(err, KeyboardInterrupt):
            raise
        print(f"modern_client: failed against {target}: {describe(err)}", file=sys.stderr)
        return 1
    print(json.dumps(captured["out"], separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
