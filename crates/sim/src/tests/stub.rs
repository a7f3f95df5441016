//! The embedded MCP stub: lifecycle, tools, progress over SSE, and what it recorded.

use serde_json::{json, Value};

use super::WAIT;
use crate::McpStub;

async fn stub() -> (McpStub, reqwest::Client) {
    let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.unwrap();
    (stub, reqwest::Client::builder().timeout(WAIT).build().unwrap())
}

async fn rpc(http: &reqwest::Client, stub: &McpStub, msg: Value) -> (u16, Value) {
    let resp = http
        .post(stub.url())
        .header("content-type", "application/json")
        .body(msg.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (
        status,
        if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        },
    )
}

fn tool(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

#[tokio::test]
async fn the_stub_initializes_lists_and_calls_its_tools() {
    let (stub, http) = stub().await;
    let init = http
        .post(stub.url())
        .body(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}).to_string(),
        )
        .send()
        .await
        .unwrap();
    assert!(init.headers()["mcp-session-id"].to_str().unwrap().starts_with("stub-"));
    let init: Value = serde_json::from_slice(&init.bytes().await.unwrap()).unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(init["result"]["serverInfo"]["name"], "tunnelgate-stub");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let (_, default) = rpc(
        &http,
        &stub,
        json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}),
    )
    .await;
    assert_eq!(default["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        rpc(
            &http,
            &stub,
            json!({"jsonrpc":"2.0","method":"notifications/initialized"})
        )
        .await
        .0,
        202
    );
    let (_, list) = rpc(&http, &stub, json!({"jsonrpc":"2.0","id":3,"method":"tools/list"})).await;
    let names: Vec<_> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "add", "slow"]);
    let (_, echo) = rpc(&http, &stub, tool(4, "echo", json!({"message": "hi"}))).await;
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: hi");
    assert_eq!(echo["id"], 4);
    let (_, add) = rpc(&http, &stub, tool(5, "add", json!({"a": 2, "b": 40}))).await;
    assert_eq!(add["result"]["content"][0]["text"], "42");
    let (_, slow) = rpc(&http, &stub, tool(6, "slow", json!({"ms": 10}))).await;
    assert_eq!(slow["result"]["content"][0]["text"], "done");
    let (_, ping) = rpc(&http, &stub, json!({"jsonrpc":"2.0","id":"p","method":"ping"})).await;
    assert_eq!(ping, json!({"jsonrpc":"2.0","id":"p","result":{}}));
    let (_, unknown) = rpc(&http, &stub, json!({"jsonrpc":"2.0","id":7,"method":"resources/list"})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let (_, bad_tool) = rpc(&http, &stub, tool(8, "nope", json!({}))).await;
    assert_eq!(bad_tool["error"]["code"], -32602);
    assert_eq!(http.delete(stub.url()).send().await.unwrap().status(), 204);
    assert_eq!(http.get(stub.url()).send().await.unwrap().status(), 405);
    assert_eq!(stub.received(), 11);
    assert_eq!(
        (stub.count("initialize"), stub.count("tools/call"), stub.count("DELETE")),
        (2, 4, 1)
    );
    assert_eq!(stub.count("notifications/initialized"), 1);
    stub.shutdown().await;
}

#[tokio::test]
async fn slow_with_a_progress_token_streams_two_progress_notifications_then_the_result() {
    let (stub, http) = stub().await;
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"slow","arguments":{"ms":50},"_meta":{"progressToken":"tok"}}});
    let resp = http
        .post(stub.url())
        .header("accept", "application/json, text/event-stream")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            serde_json::from_str(
                e.strip_prefix("event: message\ndata: ")
                    .expect("one data line per event"),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(events.len(), 3);
    for (i, e) in events[..2].iter().enumerate() {
        assert_eq!(e["method"], "notifications/progress");
        assert_eq!(
            (e["params"]["progressToken"].as_str(), e["params"]["progress"].as_u64()),
            (Some("tok"), Some(i as u64 + 1))
        );
    }
    assert_eq!(events[2]["id"], 9);
    assert_eq!(events[2]["result"]["content"][0]["text"], "done");
}

#[tokio::test]
async fn the_stub_counts_the_connections_it_accepts_not_the_requests() {
    let (stub, http) = stub().await;
    for id in 1..=3 {
        let (status, _) = rpc(&http, &stub, tool(id, "echo", json!({"message": "m"}))).await;
        assert_eq!(status, 200);
    }
    // One pooled connection for the three calls.
    assert_eq!(stub.connections_accepted(), 1);
    let other = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let (status, _) = rpc(&other, &stub, tool(4, "echo", json!({"message": "m"}))).await;
    assert_eq!(status, 200);
    assert_eq!(stub.connections_accepted(), 2);
}
