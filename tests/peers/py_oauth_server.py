"""MCP servers for OAuth discovery tests, on 127.0.0.1 only, each logging every request it
receives to stderr as `seen METHOD PATH` (no headers, no bodies).

    .peers/venv/bin/python tests/peers/py_oauth_server.py --port N --mode sdk|root|slow

Modes:
- `sdk`: the Python SDK's own OAuth resource server (MCPServer with AuthSettings and a
  token verifier that accepts no token): `/mcp` answers 401 with a Bearer challenge naming
  `resource_metadata`, and the SDK serves its RFC 9728 metadata at
  `/.well-known/oauth-protected-resource/mcp`.
- `root`: serves protected-resource metadata at the root well-known URL only
  (`/.well-known/oauth-protected-resource`), with no challenge on `/mcp`.
- `slow`: accepts every request and answers none for 60 s.
Every mode answers `GET /ready` at once (for the harness's readiness probe).
"""

import argparse
import sys

import anyio
import uvicorn
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

ISSUER = "https://auth.example.com"


class RejectAll:
    """A token verifier that accepts no token: every MCP request needs OAuth."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return None


def sdk_app(port: int):
    resource = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(
        name="tunnelgate-py-oauth-peer",
        log_level="WARNING",
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(ISSUER),
            resource_server_url=AnyHttpUrl(resource),
            required_scopes=["mcp"],
            validate_token_resource=False,
        ),
        token_verifier=RejectAll(),
    )

    @server.custom_route("/ready", methods=["GET"])
    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return f"Echo: {message}"

    return server.streamable_http_app()


def root_app(port: int):
    async def metadata(request: Request) -> Response:
        return JSONResponse(
            {
                "resource": f"http://127.0.0.1:{port}/mcp",
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp"],
            },
            headers={"Set-Cookie": "tracking=1", "X-Powered-By": "peer"},
        )

    async def mcp(request: Request) -> Response:
        return PlainTextResponse("not an MCP request", status_code=400)

    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource", metadata, methods=["GET"]),
            Route("/mcp", mcp, methods=["GET", "POST"]),
            Route("/ready", ready, methods=["GET"]),
        ]
    )


def slow_app(port: int):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] != "/ready":
            await anyio.sleep(60)
        await PlainTextResponse("late" if scope["path"] != "/ready" else "ok")(scope, receive, send)

    return app


def logged(app):
    async def wrapper(scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/ready":
            print(f"seen {scope['method']} {scope['path']}", file=sys.stderr, flush=True)
        await app(scope, receive, send)

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["sdk", "root", "slow"], required=True)
    args = parser.parse_args()
    build = {"sdk": sdk_app, "root": root_app, "slow": slow_app}[args.mode]
    uvicorn.run(logged(build(args.port)), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
