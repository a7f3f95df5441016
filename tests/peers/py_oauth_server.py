"""MCP servers for OAuth discovery tests, on 127.0.0.1 only, each logging every request it
receives to stderr as `seen METHOD PATH` and `seen-headers PATH NAMES` (header names,
never values; no bodies).

    .peers/venv/bin/python tests/peers/py_oauth_server.py --port N --mode sdk|root|slow \
        [--resource-host HOST]
    .peers/venv/bin/python tests/peers/py_oauth_server.py --port N --mode introspect \
        --issuer URL --rs-client-id ID --rs-client-secret SECRET

Modes:
- `sdk`: the Python SDK's own OAuth resource server (MCPServer with AuthSettings and a
  token verifier that accepts no token): `/mcp` answers 401 with a Bearer challenge naming
  `resource_metadata`, and the SDK serves its RFC 9728 metadata at
  `/.well-known/oauth-protected-resource/mcp`. With `--resource-host`, its resource URL
  (and the challenge's `resource_metadata`) names that host instead of 127.0.0.1: another
  origin than the one it is reached on.
- `root`: serves protected-resource metadata at the root well-known URL only
  (`/.well-known/oauth-protected-resource`), with no challenge on `/mcp`.
- `slow`: accepts every request and answers none for 60 s.
- `redirect`: redirects and bodies for Harpoon's outbound rules, and a path for its target
  templates that echoes what it was sent (see `redirect_app`).
- `introspect`: the SDK's OAuth resource server again (stateless, JSON answers, tool
  `echo`), whose metadata names `--issuer` as its authorization server, and whose token
  verifier asks that server's RFC 7662 introspection endpoint (found in its RFC 8414
  metadata) about each bearer token, authenticating as `--rs-client-id` with
  `--rs-client-secret` (client_secret_basic): a token is accepted when `active` is true.
Every mode answers `GET /ready` at once (for the harness's readiness probe).
"""

import argparse
import sys

import anyio
import httpx2 as httpx
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


def sdk_app(port: int, resource_host: str = "127.0.0.1"):
    resource = f"http://{resource_host}:{port}/mcp"
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


class Introspecting:
    """A token verifier that asks the authorization server (RFC 7662) about each token."""

    def __init__(self, issuer: str, client_id: str, client_secret: str):
        self.issuer = issuer.rstrip("/")
        self.auth = httpx.BasicAuth(client_id, client_secret)
        self.endpoint: str | None = None

    async def introspection_endpoint(self, client: httpx.AsyncClient) -> str:
        if self.endpoint is None:
            resp = await client.get(f"{self.issuer}/.well-known/oauth-authorization-server")
            resp.raise_for_status()
            self.endpoint = resp.json()["introspection_endpoint"]
        return self.endpoint

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            endpoint = await self.introspection_endpoint(client)
            resp = await client.post(endpoint, data={"token": token}, auth=self.auth)
        if resp.status_code != 200:
            return None
        claims = resp.json()
        if claims.get("active") is not True:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=claims.get("exp"),
        )


def introspect_app(port: int, issuer: str, client_id: str, client_secret: str):
    resource = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(
        name="tunnelgate-py-introspecting-peer",
        log_level="WARNING",
        auth=AuthSettings(
            # Strings, so a path-less issuer keeps its exact form (no trailing slash).
            issuer_url=issuer,
            resource_server_url=resource,
            validate_token_resource=False,
        ),
        token_verifier=Introspecting(issuer, client_id, client_secret),
    )

    @server.custom_route("/ready", methods=["GET"])
    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return f"Echo: {message}"

    return server.streamable_http_app(json_response=True, stateless_http=True)


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


def redirect_app(port: int):
    """Harpoon's redirect and size rules: `/hop` redirects (302) to `/landing`, `/away`
    to `/elsewhere`, `/loop` to itself, `/insecure` to the https form of `/landing`;
    `/big` answers 150000 bytes, `/landing` and `/elsewhere` a short JSON document;
    `/casestatus/ID` (a template's path) answers a JSON document echoing the request's
    method, its raw path and query as they arrived, and the headers a template may send
    (`authorization`, `x-request-tag`, `accept`, `user-agent`; null when absent)."""
    base = f"http://127.0.0.1:{port}"

    def to(location: str):
        async def handler(request: Request) -> Response:
            return Response(status_code=302, headers={"Location": location})

        return handler

    async def landing(request: Request) -> Response:
        return JSONResponse({"landed": request.url.path, "method": request.method})

    async def case_status(request: Request) -> Response:
        echo = {
            "method": request.method,
            "path": request.scope["raw_path"].decode("latin-1"),
            "query": request.scope["query_string"].decode("latin-1"),
        }
        for name in ["authorization", "x-request-tag", "accept", "user-agent"]:
            echo[name] = request.headers.get(name)
        return JSONResponse(echo)

    async def big(request: Request) -> Response:
        return PlainTextResponse("x" * 150000)

    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    every = ["GET", "POST", "PUT", "HEAD"]
    return Starlette(
        routes=[
            Route("/hop", to(f"{base}/landing"), methods=every),
            Route("/away", to(f"{base}/elsewhere"), methods=every),
            Route("/loop", to(f"{base}/loop"), methods=every),
            Route("/insecure", to(f"https://127.0.0.1:{port}/landing"), methods=every),
            Route("/landing", landing, methods=every),
            Route("/elsewhere", landing, methods=every),
            Route("/big", big, methods=every),
            Route("/casestatus/{case_id}", case_status, methods=every),
            Route("/ready", ready, methods=["GET"]),
        ]
    )


def logged(app):
    async def wrapper(scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/ready":
            print(f"seen {scope['method']} {scope['path']}", file=sys.stderr, flush=True)
            # The names of the request's headers (never their values), for the tests of
            # what an outbound call forwards.
            names = sorted({name.decode("latin-1").lower() for name, _ in scope["headers"]})
            print(f"seen-headers {scope['path']} {','.join(names)}", file=sys.stderr, flush=True)
        await app(scope, receive, send)

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["sdk", "root", "slow", "introspect", "redirect"], required=True)
    parser.add_argument("--issuer", help="introspect: the authorization server's issuer URL")
    parser.add_argument("--rs-client-id", help="introspect: this resource server's client id")
    parser.add_argument("--rs-client-secret", help="introspect: this resource server's client secret")
    parser.add_argument(
        "--resource-host",
        default="127.0.0.1",
        help="sdk: the host its resource URL (and so its resource_metadata URL) names",
    )
    args = parser.parse_args()
    if args.mode == "introspect":
        if not (args.issuer and args.rs_client_id and args.rs_client_secret):
            parser.error("--mode introspect needs --issuer, --rs-client-id and --rs-client-secret")
        app = introspect_app(args.port, args.issuer, args.rs_client_id, args.rs_client_secret)
    elif args.mode == "sdk":
        app = sdk_app(args.port, args.resource_host)
    else:
        app = {"root": root_app, "slow": slow_app, "redirect": redirect_app}[args.mode](args.port)
    uvicorn.run(logged(app), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
