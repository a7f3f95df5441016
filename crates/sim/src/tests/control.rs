//! Poll and response endpoints without faults.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::*;
use crate::NewCommand;

#[tokio::test]
async fn calls_without_the_right_bearer_key_are_unauthorized() {
    let (sim, c) = start("").await;
    let url = c.url("poll?limit=1&timeout_ms=1");
    let none = c.http.get(&url).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(error_code(none).await, "invalid_api_key");
    let wrong = c.http.get(&url).bearer_auth("sk-other").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let post = c
        .http
        .post(c.url("response"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 401);
    let rec = sim.record();
    assert_eq!(
        rec.polls.iter().map(|p| p.status).collect::<Vec<_>>(),
        [Some(401), Some(401)]
    );
    assert_eq!(rec.responses[0].status, Some(401));
}

#[tokio::test]
async fn another_tunnel_is_not_found_and_a_malformed_tunnel_id_is_a_bad_request() {
    let (_sim, c) = start("").await;
    let get = |tunnel: &str| {
        c.http
            .get(format!("{}/v1/tunnels/{tunnel}/poll?timeout_ms=1", c.base))
            .bearer_auth(KEY)
            .send()
    };
    let other = get("tunnel_99999999999999999999999999999999").await.unwrap();
    assert_eq!(other.status(), 404);
    let malformed = get("Tunnel-1").await.unwrap();
    assert_eq!(malformed.status(), 400);
    assert_eq!(error_code(malformed).await, "invalid_tunnel_id_format");
}

#[tokio::test]
async fn an_empty_poll_answers_204_after_timeout_ms() {
    let (sim, c) = start("").await;
    let started = Instant::now();
    let resp = c.poll("limit=5&timeout_ms=300").await;
    let waited = started.elapsed();
    assert_eq!(resp.status(), 204);
    assert!(resp.bytes().await.unwrap().is_empty());
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let poll = &sim.record().polls[0];
    assert_eq!(
        (poll.limit, poll.timeout_ms, poll.status, poll.commands),
        (Some(5), Some(300), Some(204), 0)
    );
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_command_is_enqueued() {
    let (sim, c) = start("").await;
    let started = Instant::now();
    let poll = tokio::spawn(async move { c.poll("limit=5&timeout_ms=4000").await });
    while sim.shared.polls_seen() == 0 {
        assert!(started.elapsed() < WAIT, "the poll never arrived");
        tokio::task::yield_now().await;
    }
    sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":1,"method":"ping"})));
    let resp = poll.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(3), "woke only at the timeout");
}

#[tokio::test]
async fn limit_and_timeout_ms_are_validated() {
    let (sim, c) = start("").await;
    for query in [
        "limit=0",
        "limit=26",
        "limit=x",
        "limit=-1",
        "timeout_ms=0",
        "timeout_ms=abc",
    ] {
        assert_eq!(c.poll(query).await.status(), 400, "{query}");
    }
    assert_eq!(c.poll("limit=25&timeout_ms=1").await.status(), 204);
    assert_eq!(c.poll("limit=1&timeout_ms=1").await.status(), 204);
    assert_eq!(sim.record().polls.len(), 8);
}

#[tokio::test]
async fn a_poll_hands_out_at_most_limit_commands_with_fresh_ids() {
    let (sim, c) = start("").await;
    let payload = r#"{"params":{"z":1,"a":[1.50]},"id":"x","jsonrpc":"2.0","method":"tools/list"}"#;
    let raw = serde_json::value::RawValue::from_string(payload.to_owned()).unwrap();
    let first = sim.enqueue(
        NewCommand::jsonrpc_raw(raw)
            .channel("side")
            .response_timeout("30s")
            .header("X-Test", "a")
            .header("X-Test", "b"),
    );
    sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"ping"})));
    sim.enqueue(NewCommand::session_termination(Some("sess-1")));
    let resp = c.poll("limit=2&timeout_ms=1000").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let text = String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap();
    assert!(text.contains(payload), "the payload is sent byte for byte: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let cmds = body["commands"].as_array().unwrap();
    assert_eq!(cmds.len(), 2);
    let cmd = &cmds[0];
    assert_eq!(cmd["request_id"], first.as_str());
    assert!(first.starts_with("req_") && cmd["shard_token"].as_str().unwrap().starts_with("shard_"));
    assert_ne!(cmds[0]["shard_token"], cmds[1]["shard_token"]);
    assert_eq!(
        (cmd["channel"].as_str(), cmd["command_type"].as_str()),
        (Some("side"), Some("jsonrpc"))
    );
    assert_eq!(cmd["response_timeout"], "30s");
    assert_eq!(cmd["headers"], json!({"X-Test": ["a", "b"]}));
    assert!(humantime::parse_rfc3339(cmd["created_at"].as_str().unwrap()).is_ok());
    assert_eq!(cmds[1]["channel"], "main");
    assert!(cmds[1].get("response_timeout").is_none());
    let rest = c.commands().await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["command_type"], "session_termination");
    assert_eq!(rest[0]["headers"], json!({"Mcp-Session-Id": ["sess-1"]}));
    assert!(rest[0].get("jsonrpc").is_none());
    assert_eq!(sim.record().issued(), 3);
}

#[tokio::test]
async fn a_poll_that_names_channels_gets_only_their_commands_and_the_rest_stay_queued_in_order() {
    let (sim, c) = start("").await;
    let ping = |id: u32| NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"ping"}));
    let main_1 = sim.enqueue(ping(1));
    let side = sim.enqueue(ping(2).channel("side"));
    let other = sim.enqueue(ping(3).channel("other"));
    let main_2 = sim.enqueue(ping(4).channel(""));
    sim.enqueue_raw(json!({"request_id":"req_raw","shard_token":"s","command_type":"jsonrpc","channel":"side"}));
    let ids = |cmds: Vec<Value>| -> Vec<String> {
        cmds.iter()
            .map(|c| c["request_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let resp = c.poll("limit=25&timeout_ms=1000&channel=main&channel=side").await;
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    let taken = ids(body["commands"].as_array().unwrap().clone());
    assert_eq!(
        taken,
        [main_1.clone(), side.clone(), main_2.clone(), "req_raw".to_owned()]
    );
    assert_eq!(c.poll("limit=1&timeout_ms=1&channel=side").await.status(), 204);
    assert_eq!(
        ids(c.commands().await),
        std::slice::from_ref(&other),
        "an unfiltered poll takes the rest"
    );
    let record = sim.record();
    assert_eq!(record.polls[0].channels, ["main", "side"]);
    assert_eq!(record.polls[0].request_ids, taken);
    assert!(record.polls[1].channels == ["side"] && record.polls[1].request_ids.is_empty());
    assert!(record.polls[2].channels.is_empty() && record.polls[2].request_ids == [other]);
}

#[tokio::test]
async fn a_poll_whose_client_goes_away_is_marked_abandoned_and_takes_nothing() {
    let (sim, c) = start("").await;
    let poll = tokio::spawn(async move { c.poll("limit=5&timeout_ms=4000").await });
    let started = Instant::now();
    while sim.shared.polls_seen() == 0 {
        assert!(started.elapsed() < WAIT, "the poll never arrived");
        tokio::task::yield_now().await;
    }
    poll.abort();
    sim.wait_for("the dropped poll marked abandoned", WAIT, |r| r.polls[0].abandoned)
        .await
        .unwrap();
    let id = sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":1,"method":"ping"})));
    let next = Client::new(&sim.base_url()).one_command().await;
    assert_eq!(next["request_id"], id.as_str(), "the command waited for a live poll");
    let record = sim.record();
    assert_eq!((record.polls[0].status, record.polls[0].commands), (None, 0));
    assert!(!record.polls.last().unwrap().abandoned);
}

#[tokio::test]
async fn raw_commands_are_handed_out_verbatim() {
    let (sim, c) = start("").await;
    let raw = json!({"request_id": "req_raw", "shard_token": "tok", "command_type": "teleport", "extra": [1, 2]});
    sim.enqueue_raw(raw.clone());
    sim.enqueue_raw(json!(17));
    let cmds = c.commands().await;
    assert_eq!(cmds, vec![raw, json!(17)]);
    let ack = c
        .respond(
            "tok",
            &json!({"request_id": "req_raw", "resp_code": 200, "resp_type": "notify_ack"}),
        )
        .await;
    assert_eq!(ack.status(), 200, "a raw command with ids can be answered");
}

#[tokio::test]
async fn a_final_response_is_acked_once_and_then_not_found() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let (_, shard) = ids(&c.one_command().await);
    let first = c.respond(&shard, &final_body(&id, 1)).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "application/json");
    assert_eq!(first.bytes().await.unwrap(), r#"{"status":"ok"}"#);
    let again = c.respond(&shard, &final_body(&id, 1)).await;
    assert_eq!(again.status(), 404);
    assert_eq!(error_code(again).await, "pending_request_not_found");
    let rec = sim.record();
    assert!(rec.is_completed(&id));
    let attempts: Vec<_> = rec
        .responses_for(&id)
        .map(|r| (r.attempt, r.status, r.completed))
        .collect();
    assert_eq!(attempts, [(1, Some(200), true), (2, Some(404), false)]);
}

#[tokio::test]
async fn a_notification_does_not_complete_the_request() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "slow")));
    let (_, shard) = ids(&c.one_command().await);
    assert_eq!(c.respond(&shard, &notify_body(&id)).await.status(), 200);
    assert_eq!(c.respond(&shard, &notify_body(&id)).await.status(), 200);
    assert!(!sim.record().is_completed(&id));
    assert_eq!(c.respond(&shard, &final_body(&id, 1)).await.status(), 200);
    assert_eq!(
        c.respond(&shard, &notify_body(&id)).await.status(),
        404,
        "nothing is pending after the final"
    );
    let completed: Vec<_> = sim.record().responses.iter().map(|r| r.completed).collect();
    assert_eq!(completed, [false, false, true, false]);
}

#[tokio::test]
async fn a_wrong_or_missing_shard_token_is_rejected() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let (_, shard) = ids(&c.one_command().await);
    let body = serde_json::to_vec(&final_body(&id, 1)).unwrap();
    let wrong = c
        .respond_bytes(Some("shard_other"), "application/json", body.clone())
        .await;
    assert_eq!(wrong.status(), 401);
    assert_eq!(error_code(wrong).await, "tunnel_request_mismatch");
    assert_eq!(
        c.respond_bytes(None, "application/json", body.clone()).await.status(),
        401
    );
    assert_eq!(
        c.respond_bytes(Some(&shard), "application/json", body).await.status(),
        200
    );
}

#[tokio::test]
async fn payloads_that_break_the_schema_are_bad_requests() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let (_, shard) = ids(&c.one_command().await);
    let cases = [
        "not json".to_owned(),
        "[]".to_owned(),
        json!({"resp_code": 200}).to_string(),
        json!({"request_id": id, "resp_type": "jsonrpc_response"}).to_string(),
        json!({"request_id": id, "resp_code": 200, "shard_token": shard}).to_string(),
        json!({"request_id": id, "resp_code": "200"}).to_string(),
        json!({"request_id": id, "resp_code": 200, "resp_type": "final"}).to_string(),
        json!({"request_id": id, "resp_code": 200, "resp_json": [1]}).to_string(),
        json!({"request_id": id, "resp_code": 200, "resp_headers": {"A": "b"}}).to_string(),
        json!({"request_id": id, "resp_code": 200, "resp_headers": null}).to_string(),
        json!({"request_id": id, "resp_code": 200, "channel": "Main!"}).to_string(),
        json!({"request_id": 5, "resp_code": 200}).to_string(),
    ];
    for body in &cases {
        let resp = c
            .respond_bytes(Some(&shard), "application/json", body.clone().into_bytes())
            .await;
        assert_eq!(resp.status(), 400, "{body}");
    }
    let valid = serde_json::to_vec(&final_body(&id, 1)).unwrap();
    assert_eq!(
        c.respond_bytes(Some(&shard), "text/plain", valid.clone())
            .await
            .status(),
        400,
        "Content-Type is checked"
    );
    assert!(!sim.record().is_completed(&id), "rejected POSTs complete nothing");
    let minimal = json!({"request_id": id, "resp_code": 200}).to_string().into_bytes();
    assert_eq!(
        c.respond_bytes(Some(&shard), "application/json; charset=utf-8", minimal)
            .await
            .status(),
        200
    );
    assert!(
        sim.record().is_completed(&id),
        "resp_type defaults to jsonrpc_response, a final type"
    );
}

#[tokio::test]
async fn unknown_request_ids_are_not_found() {
    let (_sim, c) = start("").await;
    let resp = c.respond("shard_x", &final_body("req_unknown", 1)).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(error_code(resp).await, "pending_request_not_found");
}

#[tokio::test]
async fn headers_and_body_bytes_are_recorded_as_sent() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let resp = c
        .http
        .get(c.url("poll?limit=1&timeout_ms=500"))
        .bearer_auth(KEY)
        .header("X-Tunnel-Client-Name", "TunnelGate")
        .send()
        .await
        .unwrap();
    let cmd: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    let shard = cmd["commands"][0]["shard_token"].as_str().unwrap().to_owned();
    let body = format!(
        r#"{{"request_id":"{id}","resp_code":200,"resp_json":{{"jsonrpc":"2.0","id":1,"result":{{"n":1.50}}}}}}"#
    )
    .into_bytes();
    assert_eq!(
        c.respond_bytes(Some(&shard), "application/json", body.clone())
            .await
            .status(),
        200
    );
    let rec = sim.record();
    assert_eq!(rec.polls[0].header("x-tunnel-client-name"), Some("TunnelGate"));
    assert!(
        rec.polls[0].headers.iter().any(|(n, _)| n == "x-tunnel-client-name"),
        "names are lowercased"
    );
    assert_eq!(
        rec.polls[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let r = &rec.responses[0];
    assert_eq!(r.body.as_ref(), &body[..]);
    assert_eq!(r.header("X-Tunnel-Shard-Token"), Some(shard.as_str()));
    assert_eq!(
        (r.request_id.as_deref(), r.order, r.resp_type.as_deref()),
        (Some(id.as_str()), Some(1), None)
    );
}

#[tokio::test]
async fn wait_for_names_what_it_waited_for_when_it_times_out() {
    let (sim, _c) = start("").await;
    let err = sim
        .wait_for("a response", Duration::from_millis(50), |r| !r.responses.is_empty())
        .await
        .unwrap_err();
    assert!(err.contains("a response"), "{err}");
    sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let rec = sim
        .wait_for("a queued command", WAIT, |r| r.commands.len() == 1)
        .await
        .unwrap();
    assert_eq!(rec.commands[0].method.as_deref(), Some("tools/call"));
    sim.shutdown().await;
}

#[tokio::test]
async fn tunnel_metadata_checks_the_caller_and_hands_out_no_command() {
    let (sim, c) = start("").await;
    sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let url = format!("{}/v1/tunnels/{TUNNEL}", c.base);
    let ok = c.http.get(&url).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let body: Value = serde_json::from_slice(&ok.bytes().await.unwrap()).unwrap();
    assert_eq!(body["id"], TUNNEL);
    let wrong_key = c.http.get(&url).bearer_auth("sk-other").send().await.unwrap();
    assert_eq!(wrong_key.status(), 401);
    assert_eq!(error_code(wrong_key).await, "invalid_api_key");
    let other = c
        .http
        .get(format!("{}/v1/tunnels/tunnel_99999999999999999999999999999999", c.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(error_code(other).await, "tunnel_not_found");
    let rec = sim.record();
    assert_eq!(
        rec.lookups.iter().map(|l| l.status).collect::<Vec<_>>(),
        [200, 401, 404]
    );
    assert_eq!(rec.lookups[0].header("authorization"), Some(&*format!("Bearer {KEY}")));
    assert!(rec.polls.is_empty());
    assert_eq!(rec.issued(), 0, "a metadata request takes no command");
}

#[tokio::test]
async fn a_response_with_an_escaped_lone_surrogate_is_refused_finally_as_the_service_does() {
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let polled = c.poll("limit=1&timeout_ms=500").await.json::<Value>().await.unwrap();
    let (_, shard) = ids(&polled["commands"][0]);
    let lone = format!(
        r#"{{"request_id":"{id}","channel":"main","resp_json":{{"jsonrpc":"2.0","id":1,"result":{{"text":"a\ud800"}}}},"resp_headers":{{}},"resp_code":200,"resp_type":"jsonrpc_response"}}"#
    );
    let refused = c
        .respond_bytes(Some(&shard), "application/json", lone.into_bytes())
        .await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_json_payload", "{body}");
    assert!(!sim.record().is_completed(&id), "nothing was completed");
    // A valid pair is text like any other.
    let pair = format!(
        r#"{{"request_id":"{id}","channel":"main","resp_json":{{"jsonrpc":"2.0","id":1,"result":{{"text":"\ud83d\ude00"}}}},"resp_headers":{{}},"resp_code":200,"resp_type":"jsonrpc_response"}}"#
    );
    let accepted = c
        .respond_bytes(Some(&shard), "application/json", pair.into_bytes())
        .await;
    assert_eq!(accepted.status(), 200);
}

#[tokio::test]
async fn resp_timing_is_refused_unless_accepted_and_then_only_in_its_shape() {
    let timed = |id: &str, timing: Value| {
        let mut body = final_body(id, 1);
        body["resp_timing"] = timing;
        body
    };
    let good = json!({"version": 1, "transport": "stdio", "target_elapsed_us": 1234});
    let (sim, c) = start("").await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let polled = c.poll("limit=1&timeout_ms=500").await.json::<Value>().await.unwrap();
    let (_, shard) = ids(&polled["commands"][0]);
    let refused = c.respond(&shard, &timed(&id, good.clone())).await;
    assert_eq!(refused.status(), 400, "the published contract refuses an unknown field");

    let mut config = SimConfig::new(TUNNEL, KEY);
    config.accept_resp_timing = true;
    let (sim, c) = start_with(config).await;
    let id = sim.enqueue(NewCommand::jsonrpc(call(1, "echo")));
    let polled = c.poll("limit=1&timeout_ms=500").await.json::<Value>().await.unwrap();
    let (_, shard) = ids(&polled["commands"][0]);
    for bad in [
        json!({"version": 2, "transport": "stdio", "target_elapsed_us": 1}),
        json!({"version": 1, "transport": "carrier_pigeon", "target_elapsed_us": 1}),
        json!({"version": 1, "transport": "stdio", "target_elapsed_us": 86_400_000_001_u64}),
        json!("fast"),
    ] {
        assert_eq!(c.respond(&shard, &timed(&id, bad.clone())).await.status(), 400, "{bad}");
    }
    assert_eq!(c.respond(&shard, &timed(&id, good)).await.status(), 200);
}
