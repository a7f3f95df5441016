//! The transport through an egress proxy, against a scripted raw server standing in for
//! the proxy: what each proxy answer proves, and what the admission's "may have sent"
//! flag says after it (strict mode).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::timeout;

use serde_json::value::RawValue;

use super::*;
use crate::downstream::test_support::{assert_row, A, N};
use crate::downstream::LegOutcome;
use crate::egress::proxy::ProxyUrl;
use crate::protocol::JsonRpcPayload;
use crate::scripted_peer::{Act, Server};
use crate::strict::{CommandRef, Fence};

const TEST_BOUND: Duration = Duration::from_secs(10);
const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;

/// A transport for `target` whose every request goes through the proxy at `proxy`.
fn through(proxy: &str, target: &str) -> HttpTransport {
    let settings = HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        max_body_bytes: 1 << 20,
    };
    let egress = HttpEgress {
        proxy: ProxySetting::Via(ProxyUrl::new("mcp.proxy", proxy).unwrap()),
        socket: None,
        tls: None,
    };
    let url = HttpUrl::endpoint("mcp.channels.main.url", target).unwrap();
    HttpTransport::with_egress("main", &url, settings, egress).unwrap()
}

/// One strict leg of [`CALL`]; returns its result and whether the admission says the
/// request may have reached a server.
async fn strict_call(t: &HttpTransport) -> (LegResult, bool) {
    let fence = Fence::new(true, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    let payload = JsonRpcPayload::from_raw(RawValue::from_string(CALL.to_owned()).unwrap()).unwrap();
    let (tx, _rx) = mpsc::channel(8);
    let req = DownstreamRequest {
        payload: &payload,
        headers: &Vec::new(),
        deadline: None,
    };
    let result = timeout(TEST_BOUND, t.call(&admission, &req, &tx)).await.unwrap();
    (result, admission.is_sent())
}

fn proxy_url(server: &Server) -> String {
    format!("http://{}", server.addr)
}

#[tokio::test]
async fn a_forwarding_proxys_407_is_not_sent_and_clears_the_may_have_sent_flag() {
    let proxy = Server::answering("407 Proxy Authentication Required", &[("content-length", "0")], b"").await;
    let t = through(&proxy_url(&proxy), "http://mcp.test:9/mcp");
    let (result, sent) = strict_call(&t).await;
    assert_row(
        &result,
        LegFailure::ProxyAuthRequired,
        LegOutcome::NotSent,
        "connect",
        Some("dial"),
        N,
    );
    assert!(
        !sent,
        "the proxy forwarded nothing: the admission says nothing was sent"
    );
    let seen = proxy.seen();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(
        seen[0].path, "http://mcp.test:9/mcp",
        "plain http is forwarded in absolute form"
    );
    assert!(!t.status().up);
}

#[tokio::test]
async fn a_forwarding_proxys_502_and_504_are_abandoned_and_stay_sent() {
    for status in ["502 Bad Gateway", "504 Gateway Timeout"] {
        let proxy = Server::answering(status, &[("content-length", "0")], b"").await;
        let t = through(&proxy_url(&proxy), "http://mcp.test:9/mcp");
        let (result, sent) = strict_call(&t).await;
        let code: u16 = status[..3].parse().unwrap();
        // The origin may have seen it.
        assert_row(
            &result,
            LegFailure::HttpStatus(code),
            LegOutcome::Abandoned,
            "target_http",
            Some("http_status"),
            A,
        );
        assert!(sent, "{status}: the request may have been forwarded");
    }
}

#[tokio::test]
async fn a_refused_connect_is_not_sent_and_nothing_was_sent() {
    for (status, failure) in [
        ("403 Forbidden", LegFailure::ProxyRefused),
        ("502 Bad Gateway", LegFailure::ProxyRefused),
        ("407 Proxy Authentication Required", LegFailure::ProxyAuthRequired),
    ] {
        let proxy = Server::answering(status, &[("content-length", "0")], b"").await;
        let t = through(&proxy_url(&proxy), "https://mcp.test:9443/mcp");
        let (result, sent) = strict_call(&t).await;
        assert_row(&result, failure, LegOutcome::NotSent, "connect", Some("dial"), N);
        assert!(!sent, "{status}: a CONNECT that failed sent nothing of the request");
        assert_eq!(proxy.seen()[0].method, "CONNECT", "{status}");
        assert_eq!(proxy.seen()[0].path, "mcp.test:9443");
    }
}

#[tokio::test]
async fn a_proxy_that_cuts_the_connect_is_not_sent() {
    let proxy = Server::start(vec![Act::Close]).await;
    let t = through(&proxy_url(&proxy), "https://mcp.test:9443/mcp");
    let (result, sent) = strict_call(&t).await;
    assert_row(
        &result,
        LegFailure::ProxyRefused,
        LegOutcome::NotSent,
        "connect",
        Some("dial"),
        N,
    );
    assert!(!sent);
}

#[tokio::test]
async fn a_proxy_that_refuses_the_tcp_connect_is_not_sent() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    for target in ["http://mcp.test:9/mcp", "https://mcp.test:9443/mcp"] {
        let t = through(&format!("http://127.0.0.1:{port}"), target);
        let (result, sent) = strict_call(&t).await;
        assert_row(
            &result,
            LegFailure::ConnectRefused,
            LegOutcome::NotSent,
            "connect",
            Some("connection_refused"),
            N,
        );
        assert!(!sent, "{target}");
    }
}

#[tokio::test]
async fn a_forwarding_proxy_cut_after_the_request_is_abandoned() {
    let proxy = Server::start(vec![Act::Close]).await;
    let t = through(&proxy_url(&proxy), "http://mcp.test:9/mcp");
    let (result, sent) = strict_call(&t).await;
    assert_row(
        &result,
        LegFailure::ConnectionLost,
        LegOutcome::Abandoned,
        "transport_closed",
        Some("connection_reset"),
        A,
    );
    assert!(sent);
}
