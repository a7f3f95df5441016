//! What the simulator writes satisfies the contracts' schemas (`openapi.json` and
//! `openapi-2026-08-25.json`).

use serde_json::{json, Value};

use super::*;
use crate::NewCommand;

/// The vendored contracts: the 0.0.13 one and the 2026-08-25 one.
fn contracts() -> [Value; 2] {
    ["openapi.json", "openapi-2026-08-25.json"].map(|file| {
        let path = format!("{}/../../contract/{file}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).expect("the vendored contract is in contract/")).unwrap()
    })
}

/// Validates `instance` against `#/components/schemas/{name}` of each contract.
fn assert_valid(name: &str, instance: &Value) {
    for mut schema in contracts() {
        schema["$ref"] = json!(format!("#/components/schemas/{name}"));
        if let Err(e) = jsonschema::validate(&schema, instance) {
            panic!("{name}: {e}: {instance}");
        }
    }
}

async fn body(resp: reqwest::Response) -> Value {
    serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn poll_bodies_acks_and_error_bodies_satisfy_the_contract() {
    let (sim, c) = start("[[rule]]\nmatch = { order = 1 }\nattempts = [1]\nstatus = 429").await;
    let id = sim.enqueue(
        NewCommand::jsonrpc(call(1, "echo"))
            .header("Mcp-Session-Id", "s")
            .response_timeout("4500ms"),
    );
    sim.enqueue(NewCommand::session_termination(Some("s")).channel("side"));
    let polled = body(c.poll("limit=5&timeout_ms=500").await).await;
    assert_valid("PolledCommandList", &polled);
    let shard = polled["commands"][0]["shard_token"].as_str().unwrap().to_owned();
    assert_valid(
        "APIErrorResponse",
        &body(c.respond(&shard, &final_body(&id, 1)).await).await,
    );
    assert_valid("TunnelResponsePayload", &final_body(&id, 1));
    assert_valid(
        "TunnelResponseAck",
        &body(c.respond(&shard, &final_body(&id, 1)).await).await,
    );
    for resp in [
        c.respond(&shard, &final_body(&id, 1)).await,
        c.http.get(c.url("poll")).send().await.unwrap(),
        c.poll("limit=99").await,
    ] {
        assert_valid("APIErrorResponse", &body(resp).await);
    }
}

#[tokio::test]
async fn tunnel_metadata_satisfies_the_contract() {
    let (_sim, c) = start("").await;
    let resp = c
        .http
        .get(format!("{}/v1/tunnels/{TUNNEL}", c.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_valid("TunnelClientMetadata", &body(resp).await);
}

#[test]
fn the_contract_fixture_response_passes_the_simulator_validation() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contract/fixtures/jsonrpc_notify_response.json"
    );
    let fixture = bytes::Bytes::from(std::fs::read(path).unwrap());
    let payload = crate::validate::payload(&fixture, false).unwrap();
    assert_eq!(payload.request_id, "cmd_fixture_jsonrpc");
    assert!(!payload.reply.resp_type.is_terminal());
    assert_eq!(
        payload.reply.resp_json.as_deref(),
        Some(
            &br#"{
    "jsonrpc": "2.0",
    "method": "notifications/progress",
    "params": {
      "progress": 0.5
    }
  }"#[..]
        )
    );
}
