//! MCP ingress, with the test playing the gateway: poll, then post responses.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

async fn with_ingress_timeout(timeout: Duration) -> (Simulator, Client) {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.ingress_timeout = timeout;
    start_with(config).await
}

fn mcp_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

/// Polls the one command and returns it with its raw poll body.
async fn poll_raw(c: &Client) -> (Value, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = c.poll("limit=1&timeout_ms=1000").await;
        if resp.status() == 200 {
            let text = String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap();
            let body: Value = serde_json::from_str(&text).unwrap();
            return (body["commands"][0].clone(), text);
        }
        assert!(tokio::time::Instant::now() < deadline, "no command arrived");
    }
}

/// Reads the response body until `needle` appears (bounded).
async fn read_until(resp: &mut reqwest::Response, seen: &mut String, needle: &str) {
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("the stream moves")
            .unwrap();
        let chunk = chunk.unwrap_or_else(|| panic!("stream ended before {needle:?}: {seen}"));
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[tokio::test]
async fn an_mcp_request_round_trips_as_json_byte_for_byte() {
    let (sim, c) = with_ingress_timeout(Duration::from_secs(5)).await;
    let request = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"x":1.50}}"#;
    let send = mcp_client()
        .post(sim.ingress_url())
        .header("Mcp-Session-Id", "s-1")
        .header("Mcp-Protocol-Version", "2025-06-18")
        .header("Accept", "application/json")
        .bearer_auth("client-secret")
        .body(request)
        .send();
    let client = tokio::spawn(send);
    let (cmd, text) = poll_raw(&c).await;
    assert!(text.contains(request), "the client's bytes reach the gateway: {text}");
    assert_eq!(cmd["command_type"], "jsonrpc");
    assert_eq!(cmd["response_timeout"], "5000ms");
    assert_eq!(
        cmd["headers"],
        json!({"Mcp-Session-Id": ["s-1"], "Mcp-Protocol-Version": ["2025-06-18"], "Accept": ["application/json"]}),
        "the ingress forwards MCP headers, never the client's credentials"
    );
    let (id, shard) = ids(&cmd);
    let result = r#"{"jsonrpc":"2.0","id":7,"result":{"b":1,"a":[1.50]}}"#;
    let body = format!(
        r#"{{"request_id":"{id}","channel":"main","resp_json":{result},"resp_headers":{{"Content-Type":["application/json"],"Mcp-Session-Id":["s-1"],"Set-Cookie":["x"]}},"resp_code":200,"resp_type":"jsonrpc_response"}}"#
    );
    assert_eq!(
        c.respond_bytes(Some(&shard), "application/json", body.into_bytes())
            .await
            .status(),
        200
    );
    let resp = client.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.headers()["mcp-session-id"], "s-1");
    assert!(resp.headers().get("set-cookie").is_none());
    assert_eq!(resp.bytes().await.unwrap(), result.as_bytes());
}

#[tokio::test]
async fn an_sse_client_sees_each_notification_live_then_the_final() {
    let (sim, c) = with_ingress_timeout(Duration::from_secs(5)).await;
    let request = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1}}});
    let send = mcp_client()
        .post(sim.ingress_url())
        .header("Accept", "application/json, text/event-stream")
        .body(request.to_string())
        .send();
    let client = tokio::spawn(send);
    let (id, shard) = ids(&poll_raw(&c).await.0);
    assert_eq!(c.respond(&shard, &notify_body(&id)).await.status(), 200);
    let mut resp = client.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    read_until(&mut resp, &mut seen, "\n\n").await;
    assert_eq!(seen, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n");
    assert_eq!(c.respond(&shard, &final_body(&id, 3)).await.status(), 200);
    read_until(&mut resp, &mut seen, "\"result\"").await;
    assert!(
        seen.ends_with("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n"),
        "{seen}"
    );
    let end = tokio::time::timeout(WAIT, resp.chunk()).await.unwrap().unwrap();
    assert!(end.is_none(), "the stream ends after the final");
}

#[tokio::test]
async fn a_json_only_client_gets_the_final_without_notifications() {
    let (sim, c) = with_ingress_timeout(Duration::from_secs(5)).await;
    let client = tokio::spawn(
        mcp_client()
            .post(sim.ingress_url())
            .body(call(4, "slow").to_string())
            .send(),
    );
    let (id, shard) = ids(&poll_raw(&c).await.0);
    assert_eq!(c.respond(&shard, &notify_body(&id)).await.status(), 200);
    let error = json!({"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"unknown tool"}});
    let body = json!({"request_id": id, "resp_json": error, "resp_code": 404, "resp_type": "jsonrpc_response"});
    assert_eq!(c.respond(&shard, &body).await.status(), 200);
    let resp = client.await.unwrap().unwrap();
    assert_eq!(resp.status(), 404, "the MCP server's status is relayed");
    assert_eq!(
        serde_json::from_slice::<Value>(&resp.bytes().await.unwrap()).unwrap(),
        error
    );
}

#[tokio::test]
async fn a_client_notification_is_answered_202_after_notify_ack() {
    let (sim, c) = with_ingress_timeout(Duration::from_secs(5)).await;
    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let client = tokio::spawn(mcp_client().post(sim.ingress_url()).body(note.to_string()).send());
    let (id, shard) = ids(&poll_raw(&c).await.0);
    let ack = json!({"request_id": id, "resp_code": 202, "resp_type": "notify_ack"});
    assert_eq!(c.respond(&shard, &ack).await.status(), 200);
    let resp = client.await.unwrap().unwrap();
    assert_eq!(resp.status(), 202);
    assert!(resp.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn delete_becomes_a_session_termination_command() {
    let (sim, c) = with_ingress_timeout(Duration::from_secs(5)).await;
    let missing = mcp_client().delete(sim.ingress_url()).send().await.unwrap();
    assert_eq!(missing.status(), 400);
    assert_eq!(error_code(missing).await, "missing_mcp_session_id");
    let client = tokio::spawn(
        mcp_client()
            .delete(sim.ingress_url())
            .header("Mcp-Session-Id", "s-9")
            .send(),
    );
    let cmd = poll_raw(&c).await.0;
    assert_eq!(cmd["command_type"], "session_termination");
    assert_eq!(cmd["headers"]["Mcp-Session-Id"], json!(["s-9"]));
    assert!(cmd.get("jsonrpc").is_none());
    let (id, shard) = ids(&cmd);
    let done = json!({"request_id": id, "resp_code": 204, "resp_type": "session_termination_response"});
    assert_eq!(c.respond(&shard, &done).await.status(), 200);
    assert_eq!(client.await.unwrap().unwrap().status(), 204);
}

#[tokio::test]
async fn get_has_no_standalone_stream_and_other_tunnels_are_not_found() {
    let (sim, _c) = with_ingress_timeout(Duration::from_secs(5)).await;
    assert_eq!(mcp_client().get(sim.ingress_url()).send().await.unwrap().status(), 405);
    let other = format!("{}/v1/mcp/tunnel_other", sim.base_url());
    assert_eq!(mcp_client().post(other).body("{}").send().await.unwrap().status(), 404);
    let bad = mcp_client().post(sim.ingress_url()).body("[1]").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    assert!(sim.record().commands.is_empty(), "nothing was queued");
}

#[tokio::test]
async fn the_ingress_answers_504_when_the_gateway_never_responds() {
    let (sim, _c) = with_ingress_timeout(Duration::from_millis(300)).await;
    let resp = mcp_client()
        .post(sim.ingress_url())
        .body(r#"{"jsonrpc":"2.0","id":"abc","method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(
        (body["id"].as_str(), body["error"]["code"].as_i64()),
        (Some("abc"), Some(-32001))
    );
    assert_eq!(sim.record().commands[0].method.as_deref(), Some("ping"));
}
