//! Channel `harpoon` end to end, through the real binary against the simulator, a real
//! authorization server (`oidc-provider`, tests/peers/oidc_provider.mjs) and a real
//! OAuth-protected MCP server that introspects its tokens (the Python SDK,
//! `py_oauth_server.py --mode introspect`), all on loopback: the OAuth shim's whole
//! sequence (discovery on `main`, then metadata, dynamic client registration and a
//! client_credentials token through `harpoon`, and the token used on `main`), refusals
//! that reach nothing, the channel before any target exists, and secrets kept out of
//! the logs, `/status` and `/metrics`.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::Digest as _;
use tunnelgate_sim::NewCommand;

use crate::harness::{
    final_json, http_client, spawn_oidc_provider, spawn_py_introspecting_server, wait_until, ChildGuard, Gateway, Rig,
    RigOptions,
};
use crate::harness::{seen, seen_n};

const EXIT: Duration = Duration::from_secs(20);
/// The resource server's own client at the authorization server (it introspects).
const RS_CLIENT_ID: &str = "tunnelgate-it-resource-server";
const RS_CLIENT_SECRET: &str = "rs-secret-canary-7QZP4";
/// The shim's reach: the authorization server is on another loopback origin, over http.
const HARPOON: &str = "\n[harpoon]\nallow_plaintext_http = true\nregister_private_auth_servers = true\n";

/// Every file of a support bundle, concatenated.
fn unpacked(path: &std::path::Path) -> String {
    use std::io::Read as _;
    let gzip = flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap());
    let mut archive = tar::Archive::new(gzip);
    let mut all = String::new();
    for entry in archive.entries().unwrap() {
        let mut body = String::new();
        entry.unwrap().read_to_string(&mut body).unwrap();
        all.push_str(&body);
    }
    all
}

/// The authorization server, the MCP server that trusts it, and a gateway whose `main`
/// is that MCP server, with `[harpoon]` (plus `harpoon_extra`) and `log_level`.
struct Peers {
    auth: ChildGuard,
    issuer: String,
    mcp: ChildGuard,
    mcp_url: String,
    rig: Rig,
    gw: Gateway,
    /// The gateway's configuration, for the commands run beside it.
    config: String,
}

async fn start(harpoon_extra: &str, log_level: &str) -> Peers {
    start_with(harpoon_extra, log_level, "").await
}

/// As [`start`], with `telemetry_extra` added beside `log_level` (an OTLP endpoint).
async fn start_with(harpoon_extra: &str, log_level: &str, telemetry_extra: &str) -> Peers {
    start_trusting(harpoon_extra, log_level, telemetry_extra, true).await
}

/// The origin (`scheme://host:port`) of `url`.
fn origin_of(url: &str) -> String {
    url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/")
}

/// As [`start_with`]; with `trust_issuer`, the authorization server's origin (another
/// loopback port than the MCP server's) is listed in `mcp.oauth_trusted_origins`.
async fn start_trusting(harpoon_extra: &str, log_level: &str, telemetry_extra: &str, trust_issuer: bool) -> Peers {
    let (auth, issuer) = spawn_oidc_provider(RS_CLIENT_ID, RS_CLIENT_SECRET).await;
    let (mcp, mcp_url) = spawn_py_introspecting_server(&issuer, RS_CLIENT_ID, RS_CLIENT_SECRET).await;
    let rig = Rig::start("").await;
    let extra = format!("{HARPOON}{harpoon_extra}");
    let trusted = if trust_issuer {
        format!("[mcp]\noauth_trusted_origins = [\"{}\"]\n", origin_of(&issuer))
    } else {
        "[mcp]\n".to_owned()
    };
    let config = rig
        .config_to(
            &mcp_url,
            &RigOptions {
                extra: &extra,
                ..RigOptions::default_mode()
            },
        )
        .replace(
            "log_level = \"info\"",
            &format!("log_level = \"{log_level}\"\n{telemetry_extra}"),
        )
        .replace("[mcp]\n", &trusted);
    let gw = rig.spawn_gateway(&config).await;
    Peers {
        auth,
        issuer,
        mcp,
        mcp_url,
        rig,
        gw,
        config,
    }
}

impl Peers {
    /// `oauth_discovery` on `main`: answered 200 with the MCP server's metadata, which
    /// names the authorization server.
    async fn discover(&self) {
        let id = self.rig.sim.enqueue(NewCommand::oauth_discovery().channel("main"));
        let rec = self.rig.wait("discovery answered", |r| r.is_completed(&id)).await;
        let body = final_json(&rec, &id);
        assert_eq!(body["resp_code"], 200, "{body}");
        assert_eq!(body["resp_json"]["resource"], self.mcp_url.as_str(), "{body}");
        assert_eq!(
            body["resp_json"]["authorization_servers"][0],
            self.issuer.as_str(),
            "{body}"
        );
    }

    /// One JSON-RPC request on `channel` (with `headers`); the posted answer.
    async fn send(&self, channel: &str, message: Value, headers: &[(&str, &str)]) -> Value {
        let mut cmd = NewCommand::jsonrpc(message).channel(channel);
        for (name, value) in headers {
            cmd = cmd.header(*name, *value);
        }
        let id = self.rig.sim.enqueue(cmd);
        let rec = self.rig.wait("the command answered", |r| r.is_completed(&id)).await;
        final_json(&rec, &id)
    }

    /// A request on `harpoon`: answered `200` as a JSON-RPC response; its `resp_json`.
    async fn harpoon(&self, method: &str, params: Value) -> Value {
        let body = self
            .send(
                "harpoon",
                json!({"jsonrpc": "2.0", "id": format!("h-{method}"), "method": method, "params": params}),
                &[],
            )
            .await;
        assert_eq!(body["resp_type"], "jsonrpc_response", "{body}");
        assert_eq!(body["resp_code"], 200, "{body}");
        assert_eq!(body["channel"], "harpoon", "{body}");
        body["resp_json"].clone()
    }

    /// `tools/call NAME` on `harpoon`: the tool's result (a JSON-RPC error panics).
    async fn tool(&self, name: &str, arguments: Value) -> Value {
        let answer = self
            .harpoon("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        assert!(answer["error"].is_null(), "{name}: {answer}");
        answer["result"].clone()
    }

    /// `call_target`, which must succeed; its `structuredContent` and the body decoded.
    async fn call_target(&self, arguments: Value) -> (Value, Vec<u8>) {
        let result = self.tool("call_target", arguments.clone()).await;
        assert_ne!(result["isError"], true, "call_target {arguments}: {result}");
        let structured = result["structuredContent"].clone();
        let body = base64::engine::general_purpose::STANDARD
            .decode(structured["body_base64"].as_str().expect("body_base64 is a string"))
            .expect("body_base64 is base64");
        assert_eq!(structured["truncated"], false, "{structured}");
        (structured, body)
    }

    async fn stop(mut self) {
        self.rig.assert_all_bodies_valid();
        self.gw.sigterm();
        assert_eq!(self.gw.wait_exit(EXIT).await, Some(0), "{}", self.gw.stderr());
        drop((self.auth, self.mcp));
    }
}

/// What the shim's sequence obtained: the values a log must never show.
struct Obtained {
    client_id: String,
    client_secret: String,
    basic: String,
    access_token: String,
    registration_access_token: String,
}

/// The labels discovery registers for an authorization server on another loopback
/// origin with `register_private_auth_servers` (all but the PRM source URL's).
const LABELS: [&str; 9] = [
    "oauth-prmd-resource-0",
    "oauth-prmd-auth-server-0",
    "oauth-auth-server-metadata-0",
    "oauth-issuer-0",
    "oauth-token-endpoint-0",
    "oauth-jwks-uri-0",
    "oauth-introspection-endpoint-0",
    "oauth-registration-endpoint-0",
    "oauth-revocation-endpoint-0",
];

/// The OAuth shim's sequence on `harpoon` after a discovery, as the hosted service runs
/// it, then the token on `main`; asserts each step and returns what it obtained.
async fn shim_sequence(p: &Peers) -> Obtained {
    p.discover().await;

    let init = p
        .harpoon(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "oauth-shim", "version": "1"}}),
        )
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "harpoon", "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let ack = p
        .send(
            "harpoon",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[],
        )
        .await;
    assert_eq!(ack["resp_type"], "notify_ack", "{ack}");

    let tools = p.harpoon("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools is an array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["call_target", "get_oauth_target_audience", "list_targets"]);

    let listed = p.tool("list_targets", json!({})).await;
    let labels: Vec<&str> = listed["structuredContent"]["targets"]
        .as_array()
        .expect("targets is an array")
        .iter()
        .filter_map(|t| t["label"].as_str())
        .collect();
    for label in LABELS {
        assert!(labels.contains(&label), "{label} registered: {labels:?}");
    }
    assert!(
        !labels.iter().any(|l| l.contains("authorization-endpoint")),
        "the browser's endpoint is never a target: {labels:?}"
    );
    assert!(
        !listed.to_string().contains(&p.issuer),
        "list_targets never shows a URL: {listed}"
    );

    // The metadata, through harpoon: the endpoints it can reach are rewritten to labels.
    let (meta, body) = p
        .call_target(json!({"label": "oauth-auth-server-metadata-0", "method": "GET"}))
        .await;
    assert_eq!(meta["status_code"], 200, "{meta}");
    let doc: Value = serde_json::from_slice(&body).expect("the metadata is JSON");
    assert_eq!(
        doc["registration_endpoint"], "harpoon://oauth-registration-endpoint-0",
        "{doc}"
    );
    assert_eq!(doc["token_endpoint"], "harpoon://oauth-token-endpoint-0", "{doc}");
    assert_eq!(
        doc["revocation_endpoint"], "harpoon://oauth-revocation-endpoint-0",
        "{doc}"
    );
    assert_eq!(
        doc["introspection_endpoint"], "harpoon://oauth-introspection-endpoint-0",
        "{doc}"
    );
    assert_eq!(
        doc["authorization_endpoint"],
        format!("{}/auth", p.issuer),
        "never rewritten: {doc}"
    );
    assert!(meta["body_size_bytes"].as_u64().unwrap() > 0, "{meta}");

    // Dynamic client registration (RFC 7591): a confidential client for client_credentials.
    let registration = json!({
        "client_name": "tunnelgate harpoon test",
        "grant_types": ["client_credentials"],
        "response_types": [],
        "redirect_uris": [],
        "token_endpoint_auth_method": "client_secret_basic",
    });
    let (reg, body) = p
        .call_target(json!({
            "label": "oauth-registration-endpoint-0", "method": "POST",
            "headers": {"Content-Type": "application/json", "Accept": "application/json"},
            "body": registration.to_string(),
        }))
        .await;
    let client: Value = serde_json::from_slice(&body).expect("the registration answer is JSON");
    assert_eq!(reg["status_code"], 201, "{reg} {client}");
    assert_eq!(client["grant_types"], json!(["client_credentials"]), "{client}");
    assert_eq!(client["token_endpoint_auth_method"], "client_secret_basic", "{client}");
    let client_id = client["client_id"].as_str().expect("a client_id").to_owned();
    let client_secret = client["client_secret"].as_str().expect("a client_secret").to_owned();
    let registration_access_token = client["registration_access_token"]
        .as_str()
        .expect("a registration_access_token")
        .to_owned();

    // The token request (RFC 6749 §4.4), the client's credentials in a Basic header.
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:{client_secret}"));
    let (tok, body) = p
        .call_target(json!({
            "label": "oauth-token-endpoint-0", "method": "POST",
            "headers": {
                "Authorization": format!("Basic {basic}"),
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            "body": "grant_type=client_credentials",
        }))
        .await;
    let token: Value = serde_json::from_slice(&body).expect("the token answer is JSON");
    assert_eq!(tok["status_code"], 200, "{tok} {token}");
    assert_eq!(token["token_type"], "Bearer", "{token}");
    let access_token = token["access_token"].as_str().expect("an access_token").to_owned();

    // The exact token endpoint, for a private_key_jwt audience.
    let audience = p
        .tool("get_oauth_target_audience", json!({"label": "oauth-token-endpoint-0"}))
        .await;
    assert_eq!(
        audience["structuredContent"]["audience"],
        format!("{}/token", p.issuer),
        "{audience}"
    );
    let refused = p
        .tool(
            "get_oauth_target_audience",
            json!({"label": "oauth-registration-endpoint-0"}),
        )
        .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["content"][0]["text"],
        "label oauth-registration-endpoint-0: target is not an OAuth token endpoint"
    );

    // What the authorization server received so far: the discovery's metadata read, then
    // the shim's four requests, in order.
    assert_eq!(
        seen_n(&p.auth, 4).await,
        [
            "GET /.well-known/oauth-authorization-server",
            "GET /.well-known/oauth-authorization-server",
            "POST /reg",
            "POST /token",
        ]
    );

    // The token works on `main`: the MCP server introspects it and answers the call.
    let call = json!({"jsonrpc": "2.0", "id": "main-echo", "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "through harpoon"}}});
    let bearer = format!("Bearer {access_token}");
    let answered = p.send("main", call.clone(), &[("Authorization", &bearer)]).await;
    assert_eq!(answered["resp_code"], 200, "{answered}");
    assert_eq!(
        answered["resp_json"]["result"]["content"][0]["text"], "Echo: through harpoon",
        "{answered}"
    );
    assert!(
        seen_n(&p.auth, 6)
            .await
            .iter()
            .any(|s| s == "POST /token/introspection"),
        "the MCP server asked the authorization server: {:?}",
        seen(&p.auth)
    );
    // Without it the MCP server refuses the call.
    let unauthorized = p.send("main", call.clone(), &[]).await;
    assert_eq!(unauthorized["resp_code"], 401, "{unauthorized}");
    assert!(unauthorized["resp_json"]["result"].is_null(), "{unauthorized}");

    // Revocation (RFC 7009) through harpoon: the token no longer opens `main`.
    let (revoked, _) = p
        .call_target(json!({
            "label": "oauth-revocation-endpoint-0", "method": "POST",
            "headers": {
                "Authorization": format!("Basic {basic}"),
                "Content-Type": "application/x-www-form-urlencoded",
            },
            "body": format!("token={access_token}&token_type_hint=access_token"),
        }))
        .await;
    assert_eq!(revoked["status_code"], 200, "{revoked}");
    let after = p.send("main", call, &[("Authorization", &bearer)]).await;
    assert_eq!(after["resp_code"], 401, "a revoked token: {after}");

    // The audience is the token endpoint the authorization server advertises, exactly.
    let advertised: Value = http_client()
        .get(format!("{}/.well-known/oauth-authorization-server", p.issuer))
        .send()
        .await
        .expect("the metadata answers")
        .json()
        .await
        .expect("the metadata is JSON");
    assert_eq!(
        audience["structuredContent"]["audience"], advertised["token_endpoint"],
        "{advertised}"
    );

    Obtained {
        client_id,
        client_secret,
        basic,
        access_token,
        registration_access_token,
    }
}

#[tokio::test]
async fn the_oauth_shim_registers_a_client_and_gets_a_token_from_a_real_authorization_server() {
    let p = start("", "info").await;
    let obtained = shim_sequence(&p).await;
    // The registered client is real: the authorization server knows it.
    assert!(!obtained.client_id.is_empty());
    let status = p.rig.status().await;
    assert_eq!(status["harpoon"]["routable"], true, "{status}");
    p.stop().await;
}

#[tokio::test]
async fn refused_calls_reach_nothing() {
    let p = start("max_response_bytes = 4096\n", "info").await;
    p.discover().await;
    let before = seen_n(&p.auth, 1).await;
    assert_eq!(before, ["GET /.well-known/oauth-authorization-server"]);

    // A label that passes the schema but names no target.
    let unknown = p
        .tool("call_target", json!({"label": "oauth-nowhere-0", "method": "GET"}))
        .await;
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert_eq!(unknown["content"][0]["text"], "label oauth-nowhere-0: unknown target");

    // A request body over the configured limit, and over a call's own lower limit.
    let big = "x".repeat(4097);
    for (arguments, what) in [
        (
            json!({"label": "oauth-registration-endpoint-0", "method": "POST", "body": big}),
            "over harpoon.max_response_bytes",
        ),
        (
            json!({"label": "oauth-token-endpoint-0", "method": "POST",
                   "body": "grant_type=client_credentials", "max_response_bytes": 10}),
            "over the call's max_response_bytes",
        ),
    ] {
        let refused = p.tool("call_target", arguments).await;
        assert_eq!(refused["isError"], true, "{what}: {refused}");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(text.ends_with(": request body exceeds size limit"), "{what}: {text}");
    }

    // Bad arguments: a JSON-RPC error before anything runs.
    for (arguments, detail) in [
        (
            json!({"label": "oauth-token-endpoint-0", "method": "DELETE"}),
            "validating /properties/method: enum: DELETE does not equal any of: [GET POST PUT]",
        ),
        (
            json!({"label": "oauth-token-endpoint-0", "method": "post"}),
            "enum: post does not equal any of: [GET POST PUT]",
        ),
        (
            json!({"label": "oauth-token-endpoint-0", "method": "GET", "max_response_bytes": 4097}),
            "maximum: 4097/1 is greater than 4096.000000",
        ),
        (
            json!({"label": "oauth-token-endpoint-0", "method": "GET", "path": "/admin"}),
            "unexpected additional properties [\"path\"]",
        ),
    ] {
        let answer = p
            .harpoon("tools/call", json!({"name": "call_target", "arguments": arguments}))
            .await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("invalid params: validating \"arguments\": "),
            "{message}"
        );
        assert!(message.contains(detail), "{detail} in {message}");
    }

    // A call that is allowed reaches the server: the log is read after it, so nothing
    // refused above can still be on its way.
    let (meta, _) = p
        .call_target(json!({"label": "oauth-auth-server-metadata-0", "method": "GET"}))
        .await;
    assert_eq!(meta["status_code"], 200, "{meta}");
    assert_eq!(
        seen_n(&p.auth, 2).await,
        [
            "GET /.well-known/oauth-authorization-server",
            "GET /.well-known/oauth-authorization-server",
        ],
        "only the discovery's read and the allowed call reached the authorization server"
    );
    let metrics = p.rig.metrics().await;
    assert!(
        metrics.contains("request_too_large"),
        "the refusals are counted:\n{metrics}"
    );
    p.stop().await;
}

#[tokio::test]
async fn before_any_target_exists_the_channel_is_unsupported() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let id = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).channel("harpoon"));
    let rec = rig.wait("the harpoon command answered", |r| r.is_completed(&id)).await;
    let body = final_json(&rec, &id);
    assert_eq!(body["resp_type"], "jsonrpc_response", "{body}");
    assert_eq!(body["resp_code"], 400, "{body}");
    assert_eq!(
        body["resp_json"],
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
               "message": "Bad Request: unsupported channel \"harpoon\""}}),
        "{body}"
    );
    assert_eq!(rig.stub.count("tools/list"), 0, "never routed to main");
    let status = rig.status().await;
    assert_eq!(status["harpoon"]["routable"], false, "{status}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn no_secret_of_the_oauth_exchange_reaches_the_log_spans_receipts_status_page_or_bundle() {
    let (tap, port) = crate::otlp::oteltap().await;
    // A target that reads a request and never answers: a call to it ends abandoned, which
    // leaves a receipt.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_port = hole.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut conn, _)) = hole.accept().await {
            let mut buf = vec![0u8; 65536];
            let _ = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await;
            held.push(conn);
        }
    });
    let closed = format!("targets = [{{ label = \"closed\", url = \"http://127.0.0.1:{hole_port}/token\" }}]\n");
    let p = start_with(
        &closed,
        "debug",
        &format!("otlp_endpoint = \"http://127.0.0.1:{port}\""),
    )
    .await;
    let obtained = shim_sequence(&p).await;
    // The secrets go out once more, in a call written and never answered.
    let refused = p
        .tool(
            "call_target",
            json!({"label": "closed", "method": "POST", "timeout_ms": 500,
                "headers": {"Authorization": format!("Bearer {}", obtained.access_token)},
                "body": format!("client_secret={}", obtained.client_secret)}),
        )
        .await;
    assert_eq!(refused["isError"], true, "{refused}");
    let receipts = Gateway::cli(&["receipts"], Some(&p.config), &[], EXIT).await;
    assert_eq!(receipts.code, 0, "{}", receipts.stderr);
    assert!(
        receipts.stdout.contains("harpoon") && receipts.stdout.contains("abandoned"),
        "the abandoned call's receipt: {}",
        receipts.stdout
    );
    let status = p.rig.status().await.to_string();
    let metrics = p.rig.metrics().await;
    let page = http_client()
        .get(format!("http://127.0.0.1:{}/ui", p.rig.ops_port))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("oauth-token-endpoint-0"), "the page shows the targets");
    let out = p.rig.dir.path().join("bundle.tar.gz");
    let out = out.display().to_string();
    let bundle = Gateway::cli(&["support-bundle", "--out", &out], Some(&p.config), &[], EXIT).await;
    assert_eq!(bundle.code, 0, "{}", bundle.stderr);
    let archive = unpacked(std::path::Path::new(&out));
    let logs = p.gw.stderr();
    assert!(
        logs.contains("harpoon request completed"),
        "the calls were logged at all"
    );
    for (what, secret) in [
        ("the client secret", obtained.client_secret.as_str()),
        ("the Basic credential", obtained.basic.as_str()),
        ("the access token", obtained.access_token.as_str()),
        (
            "the registration access token",
            obtained.registration_access_token.as_str(),
        ),
        ("the resource server's secret", RS_CLIENT_SECRET),
    ] {
        assert!(secret.len() >= 16, "{what} is long enough to be a canary");
        assert!(!logs.contains(secret), "{what} in the gateway's log");
        assert!(!status.contains(secret), "{what} in /status: {status}");
        assert!(!metrics.contains(secret), "{what} in /metrics");
        assert!(!page.contains(secret), "{what} on the operator page");
        assert!(!archive.contains(secret), "{what} in the support bundle");
        assert!(!receipts.stdout.contains(secret), "{what} in the receipts");
    }
    p.stop().await;
    // The spans are exported by the stop at the latest.
    wait_until("the harpoon spans at the receiver", Duration::from_secs(15), || async {
        let out = tap.stdout();
        out.contains("tunnelgate.command") && out.contains("\"harpoon\"")
    })
    .await;
    let spans = tap.stdout();
    for (what, secret) in [
        ("the client secret", obtained.client_secret.as_str()),
        ("the Basic credential", obtained.basic.as_str()),
        ("the access token", obtained.access_token.as_str()),
        (
            "the registration access token",
            obtained.registration_access_token.as_str(),
        ),
        ("the resource server's secret", RS_CLIENT_SECRET),
    ] {
        assert!(!spans.contains(secret), "{what} in the exported spans");
    }
}

/// Upstream registers the URL the protected-resource metadata was fetched from as
/// `oauth-prmd-source-0` (HARPOON.md §3, bundle row 3), and derives the group tag of the
/// authorization server's rows from it (the first 6 bytes of its SHA-256).
#[tokio::test]
async fn discovery_registers_the_url_the_metadata_was_fetched_from() {
    let p = start("", "info").await;
    p.discover().await;
    // The SDK server's 401 names this document; the discovery fetched it from there.
    let source_url = p.mcp_url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    assert!(
        seen_n(&p.mcp, 2)
            .await
            .contains(&"GET /.well-known/oauth-protected-resource/mcp".to_owned()),
        "{:?}",
        seen(&p.mcp)
    );
    let listed = p.tool("list_targets", json!({})).await;
    let targets = listed["structuredContent"]["targets"].as_array().unwrap().clone();
    let source = targets.iter().find(|t| t["label"] == "oauth-prmd-source-0");
    assert!(
        source.is_some_and(|t| t["tags"] == json!(["protected-resource-metadata", "source-url"])),
        "oauth-prmd-source-0 ({source_url}) registered: {listed}"
    );
    let digest = sha2::Sha256::digest(source_url.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let group = format!("group=auth-server:{hex}:0");
    let token = targets.iter().find(|t| t["label"] == "oauth-token-endpoint-0").unwrap();
    assert!(
        token["tags"].as_array().unwrap().iter().any(|t| *t == group.as_str()),
        "{group} on the authorization server's rows: {token}"
    );
    p.stop().await;
}

#[tokio::test]
async fn an_authorization_server_on_an_untrusted_origin_is_neither_read_nor_registered_and_is_counted() {
    let p = start_trusting("", "info", "", false).await;
    p.discover().await;
    let listed = p.tool("list_targets", json!({})).await;
    let labels: Vec<&str> = listed["structuredContent"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["label"].as_str())
        .collect();
    assert!(
        labels.contains(&"oauth-prmd-resource-0"),
        "the MCP server's own rows: {labels:?}"
    );
    for label in [
        "oauth-prmd-auth-server-0",
        "oauth-auth-server-metadata-0",
        "oauth-token-endpoint-0",
    ] {
        assert!(!labels.contains(&label), "{label} not registered: {labels:?}");
    }
    let metrics = p.rig.metrics().await;
    let line = r#"tunnelgate_oauth_untrusted_origins_total{source="authorization_server"} 1"#;
    assert!(metrics.contains(line), "{line}\n{metrics}");
    let log = p.gw.stderr();
    assert!(
        log.contains("mcp.oauth_trusted_origins does not list") && log.contains(&origin_of(&p.issuer)),
        "the refusal names the origin and the key: {log}"
    );
    p.stop().await;
}

/// A gateway on the rig whose `[harpoon]` has one configured target, `cfg`, at `url`.
async fn with_target(rig: &Rig, url: &str, strict: bool) -> Gateway {
    let extra = format!(
        "\n[harpoon]\nallow_plaintext_http = true\ntargets = [{{ label = \"cfg\", url = \"{url}\", description = \"a configured target\" }}]\n"
    );
    let options = RigOptions {
        extra: &extra,
        ..if strict {
            RigOptions::default()
        } else {
            RigOptions::default_mode()
        }
    };
    rig.spawn_gateway(&rig.config(&options)).await
}

/// `tools/call call_target` on `harpoon` for `cfg`, enqueued; its request id.
fn enqueue_call(rig: &Rig, id: u64, arguments: Value) -> String {
    let mut arguments = arguments;
    arguments["label"] = json!("cfg");
    rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "call_target", "arguments": arguments}}))
        .channel("harpoon"),
    )
}

#[tokio::test]
async fn a_configured_target_makes_the_channel_routable_and_advertised_to_the_control_plane() {
    let (_slow, slow_url) = crate::harness::spawn_py_oauth_server("slow").await;
    let rig = Rig::start("").await;
    let mut gw = with_target(&rig, &slow_url, false).await;
    let id = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_targets", "arguments": null}}))
        .channel("harpoon"),
    );
    let rec = rig.wait("list_targets answered", |r| r.is_completed(&id)).await;
    let listed = &final_json(&rec, &id)["resp_json"]["result"]["structuredContent"]["targets"];
    assert_eq!(
        *listed,
        json!([{"label": "cfg", "description": "a configured target", "category": "config",
                "source": "config", "tags": [], "allowed_methods": ["GET", "POST", "PUT"]}])
    );
    let server_info = rec.polls.last().unwrap().header("x-tunnel-mcp-server-info").unwrap();
    assert_eq!(
        server_info,
        r#"{"version":2,"channels":[{"name":"main"},{"name":"harpoon","stateless":true,"proc_affinity":true}]}"#
    );
    // A configured target is never an OAuth token endpoint: the audience lookup refuses.
    let id = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "get_oauth_target_audience", "arguments": {"label": "cfg"}}}))
        .channel("harpoon"),
    );
    let rec = rig.wait("audience answered", |r| r.is_completed(&id)).await;
    let result = &final_json(&rec, &id)["resp_json"]["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["content"][0]["text"],
        "label cfg: target is not an OAuth token endpoint"
    );
    let status = rig.status().await;
    assert_eq!(status["harpoon"]["routable"], true, "{status}");
    assert_eq!(
        status["harpoon"]["targets"][0]["origin"],
        slow_url.trim_end_matches("/mcp"),
        "{status}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn calls_run_side_by_side_and_one_slow_target_holds_no_other_call() {
    let (_slow, slow_url) = crate::harness::spawn_py_oauth_server("slow").await;
    let rig = Rig::start("").await;
    let mut gw = with_target(&rig, &slow_url, false).await;
    let slow = enqueue_call(&rig, 1, json!({"method": "POST", "body": "x", "timeout_ms": 4000}));
    // Once the slow call is on the wire, a lookup and a refused call are answered at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = tokio::time::Instant::now();
    let quick = enqueue_call(&rig, 2, json!({"method": "GET", "body": "y".repeat(110_000)}));
    let rec = rig.wait("the quick call answered", |r| r.is_completed(&quick)).await;
    assert!(
        !rec.is_completed(&slow),
        "the slow call is still waiting for its target"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "answered behind the slow call"
    );
    let rec = rig.wait("the slow call answered", |r| r.is_completed(&slow)).await;
    let result = &final_json(&rec, &slow)["resp_json"]["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["content"][0]["text"],
        "label cfg: request failed: timed out after 4000 ms; the request may have reached the target and taken effect"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// A `POST` written to a target that never answers may have registered a client or issued
/// a token: strict mode latches on it as on any leg whose effect is unknown.
#[tokio::test]
async fn in_strict_mode_a_call_written_and_never_answered_latches_downstream_ambiguous() {
    let (_slow, slow_url) = crate::harness::spawn_py_oauth_server("slow").await;
    let rig = Rig::start("").await;
    let mut gw = with_target(&rig, &slow_url, true).await;
    let id = enqueue_call(
        &rig,
        1,
        json!({"method": "POST", "body": "grant_type=client_credentials", "timeout_ms": 500}),
    );
    let rec = rig.wait("the abandoned call answered", |r| r.is_completed(&id)).await;
    let result = &final_json(&rec, &id)["resp_json"]["result"];
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("may have reached the target"),
        "{result}"
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    let latch: Value = serde_json::from_str(&std::fs::read_to_string(rig.latch_path()).unwrap()).unwrap();
    assert_eq!(latch["fatal"]["category"], "downstream_ambiguous", "{latch}");
    assert_eq!(latch["fatal"]["channel"], "harpoon", "{latch}");
}

/// A call whose `timeout_ms` runs out while its connection to the target is still being
/// set up (here a TLS handshake that a listener which never reads leaves unanswered)
/// sent nothing: in strict mode, where the connector is watched, it is `not_sent` in
/// words the caller can act on, and latches nothing; the next call is served.
#[tokio::test]
async fn in_strict_mode_a_call_timed_out_while_connecting_sent_nothing_and_latches_nothing() {
    // The kernel completes the TCP handshake into the backlog; nobody speaks TLS.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a silent listener");
    let url = format!("https://127.0.0.1:{}/token", silent.local_addr().unwrap().port());
    let rig = Rig::start("").await;
    let mut gw = with_target(&rig, &url, true).await;
    for n in 1..=2 {
        let id = enqueue_call(
            &rig,
            n,
            json!({"method": "POST", "body": "grant_type=client_credentials", "timeout_ms": 500}),
        );
        let rec = rig.wait("the call answered", |r| r.is_completed(&id)).await;
        let result = &final_json(&rec, &id)["resp_json"]["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(
            text.contains("while connecting to the target; nothing was sent"),
            "call {n}: {result}"
        );
        assert!(!text.contains("may have reached"), "call {n}: {result}");
    }
    let metrics = rig.metrics().await;
    let legs = |outcome: &str| {
        let label = format!("outcome=\"{outcome}\"");
        metrics
            .lines()
            .filter(|l| l.starts_with("tunnelgate_downstream_requests_total{"))
            .find(|l| l.contains("transport=\"builtin\"") && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no builtin {label} series in\n{metrics}"))
            .to_owned()
    };
    assert_eq!(legs("not_sent"), "2", "{metrics}");
    assert_eq!(legs("abandoned"), "0", "{metrics}");
    assert!(!gw.has_exited(), "the gateway stopped: {}", gw.stderr());
    assert_eq!(rig.status().await["fatal"], Value::Null);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// A gateway whose `[harpoon]` targets are paths of the `redirect` peer at `base`.
async fn with_redirect_targets(rig: &Rig, base: &str) -> Gateway {
    let targets: Vec<String> = ["hop", "landing", "away", "loop", "insecure", "big"]
        .iter()
        .map(|p| format!("{{ label = \"{p}\", url = \"{base}/{p}\" }}"))
        .collect();
    let extra = format!(
        "\n[harpoon]\nallow_plaintext_http = true\ntargets = [{}]\n",
        targets.join(", ")
    );
    let options = RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    };
    rig.spawn_gateway(&rig.config(&options)).await
}

/// `call_target` of `label` with `extra` arguments: the tool result.
async fn call(rig: &Rig, id: u64, label: &str, extra: Value) -> Value {
    let mut arguments = json!({"label": label, "method": "GET"});
    for (k, v) in extra.as_object().unwrap() {
        arguments[k] = v.clone();
    }
    let cmd = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "call_target", "arguments": arguments}}))
        .channel("harpoon"),
    );
    let rec = rig.wait("call_target answered", |r| r.is_completed(&cmd)).await;
    final_json(&rec, &cmd)["resp_json"]["result"].clone()
}

fn error_text(result: &Value) -> &str {
    assert_eq!(result["isError"], true, "{result}");
    result["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn redirects_are_followed_only_to_targets_within_the_limit_and_a_large_answer_is_refused() {
    let (peer, ready) = crate::harness::spawn_py_oauth_server("redirect").await;
    let base = ready.trim_end_matches("/mcp").to_owned();
    let rig = Rig::start("").await;
    let mut gw = with_redirect_targets(&rig, &base).await;

    // To a target: followed; the answer is the landing's.
    let landed = call(&rig, 1, "hop", json!({})).await;
    assert_eq!(landed["structuredContent"]["status_code"], 200, "{landed}");
    // Not followed when asked not to: the 302 itself, its Location rewritten to the label.
    let kept = call(&rig, 2, "hop", json!({"follow_redirects": false})).await;
    assert_eq!(kept["structuredContent"]["status_code"], 302, "{kept}");
    assert_eq!(
        kept["structuredContent"]["headers"]["Location"][0], "harpoon://landing",
        "{kept}"
    );
    // Off the allowlist: blocked before it is dialled.
    assert_eq!(
        error_text(&call(&rig, 3, "away", json!({})).await),
        "label away: redirect blocked"
    );
    // A loop hits the limit; so does any redirect with max_redirects 0.
    assert_eq!(
        error_text(&call(&rig, 4, "loop", json!({})).await),
        "label loop: redirect limit exceeded"
    );
    assert_eq!(
        error_text(&call(&rig, 5, "hop", json!({"max_redirects": 0})).await),
        "label hop: redirect limit exceeded"
    );
    // Only the scheme differs from a target: said so.
    assert_eq!(
        error_text(&call(&rig, 6, "insecure", json!({})).await),
        "label insecure: redirect blocked: scheme mismatch (allowlisted http, redirected to https)"
    );
    // Over the limit: an error, never a partial body.
    assert_eq!(
        error_text(&call(&rig, 7, "big", json!({})).await),
        "label big: response exceeds size limit"
    );
    let peer_log = seen(&peer);
    assert!(
        !peer_log.iter().any(|l| l.contains("/elsewhere")),
        "the blocked redirect was dialled: {peer_log:?}"
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_harpoon_refusals_total{reason=\"redirect_blocked\"} 2"),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// What a real target receives: the caller's own headers, minus hop-by-hop, forwarding,
/// proxy, identity and `Connection`-named ones, and never the tunnel command's own headers
/// (the connector's bearer token) or the gateway's credentials.
#[tokio::test]
async fn a_target_receives_the_callers_headers_without_hop_by_hop_forwarding_or_the_commands_own() {
    let (peer, ready) = crate::harness::spawn_py_oauth_server("redirect").await;
    let base = ready.trim_end_matches("/mcp").to_owned();
    let rig = Rig::start("").await;
    let mut gw = with_redirect_targets(&rig, &base).await;

    let headers = json!({
        "X-Kept": "1", "Accept": "application/json",
        "Connection": "x-named", "X-Named": "1", "Keep-Alive": "5", "TE": "trailers",
        "Cookie": "a=b", "X-Forwarded-For": "203.0.113.9", "Forwarded": "for=x",
        "Proxy-Authorization": "Basic eDp5", "Via": "1.1 x", "True-Client-IP": "203.0.113.9",
        "Host": "evil.example", "User-Agent": "caller/1",
    });
    let arguments = json!({"label": "landing", "method": "GET", "headers": headers});
    let cmd = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "call_target", "arguments": arguments}}))
        .channel("harpoon")
        .header("Authorization", "Bearer connector-token-canary-9XK2")
        .header("X-Command-Only", "1"),
    );
    let rec = rig.wait("call_target answered", |r| r.is_completed(&cmd)).await;
    let answer = final_json(&rec, &cmd);
    let result = &answer["resp_json"]["result"];
    assert_eq!(result["structuredContent"]["status_code"], 200, "{answer}");

    wait_until("the target logged the headers", Duration::from_secs(10), || async {
        peer.stderr().contains("seen-headers /landing ")
    })
    .await;
    let stderr = peer.stderr();
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("seen-headers /landing "))
        .expect("a header line");
    let names: Vec<&str> = line.split(',').collect();
    for kept in ["x-kept", "accept", "host", "user-agent"] {
        assert!(names.contains(&kept), "{kept} missing: {names:?}");
    }
    for dropped in [
        "x-named",
        "keep-alive",
        "te",
        "cookie",
        "x-forwarded-for",
        "forwarded",
        "proxy-authorization",
        "via",
        "true-client-ip",
        "authorization",
        "x-command-only",
    ] {
        assert!(!names.contains(&dropped), "{dropped} reached the target: {names:?}");
    }
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_plaintext_target_without_allow_plaintext_http_refuses_the_start_naming_the_key() {
    let rig = Rig::start("").await;
    let extra = "\n[harpoon]\ntargets = [{ label = \"idp\", url = \"http://127.0.0.1:9/token?secret=s3cr3t\" }]\n";
    let config = rig.config(&RigOptions {
        extra,
        ..RigOptions::default_mode()
    });
    let run = Gateway::cli(&["check"], Some(&config), &[], EXIT).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains("harpoon.targets[0].url"), "{}", run.stderr);
    assert!(run.stderr.contains("allow_plaintext_http"), "{}", run.stderr);
    assert!(!run.stderr.contains("s3cr3t"), "{}", run.stderr);
}

#[tokio::test]
async fn doctor_checks_that_each_configured_target_answers_and_names_one_that_does_not() {
    let (_peer, ready) = crate::harness::spawn_py_oauth_server("redirect").await;
    let base = ready.trim_end_matches("/mcp").to_owned();
    let rig = Rig::start("").await;
    let closed = crate::harness::free_port();
    let extra = format!(
        "\n[harpoon]\nallow_plaintext_http = true\ntargets = [{{ label = \"up\", url = \"{base}/landing?k=secret-query\" }}, {{ label = \"down\", url = \"http://127.0.0.1:{closed}/token\" }}]\n"
    );
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    });
    let doctor = Gateway::cli(&["doctor"], Some(&config), &[], EXIT).await;
    let line = |name: &str| {
        doctor
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_default()
            .to_owned()
    };
    let up = line("harpoon.up");
    assert!(
        up.starts_with("ok") && up.contains("answered HTTP 200"),
        "{}",
        doctor.stdout
    );
    let down = line("harpoon.down");
    assert!(
        down.starts_with("FAIL") && down.contains("refused the connection"),
        "{}",
        doctor.stdout
    );
    assert!(!doctor.stdout.contains("secret-query"), "{}", doctor.stdout);
    assert_ne!(doctor.code, 0);
}
