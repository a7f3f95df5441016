//! Every fault action, on response POSTs and on polls, and fed commands.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::*;
use crate::{FaultAction, NewCommand};

/// Queues one `tools/call` and polls it; returns (request id, shard token).
async fn one(sim: &Simulator, c: &Client, tool: &str) -> (String, String) {
    sim.enqueue(NewCommand::jsonrpc(call(1, tool)));
    ids(&c.one_command().await)
}

#[tokio::test]
async fn a_held_post_is_read_whole_and_never_answered() {
    let (sim, c) = start("[[rule]]\nmatch = { order = 1 }\nattempts = [1]\naction = \"hold\"").await;
    let (id, shard) = one(&sim, &c, "echo").await;
    let body = serde_json::to_vec(&final_body(&id, 1)).unwrap();
    let req = c
        .http
        .post(c.url("response"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .header("x-tunnel-shard-token", &shard);
    let err = req
        .body(body.clone())
        .timeout(Duration::from_millis(400))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let rec = sim.record();
    let held = &rec.responses[0];
    assert_eq!(
        (held.fault.clone(), held.status, held.completed),
        (Some(FaultAction::Hold), None, false)
    );
    assert_eq!(held.body.as_ref(), &body[..], "the whole body was read before holding");
    let retry = c.respond_bytes(Some(&shard), "application/json", body).await;
    assert_eq!(retry.status(), 200, "a held POST does not complete the request");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_closed_post_drops_the_connection_without_a_response() {
    let (sim, c) = start("[[rule]]\nmatch = { order = 1 }\nattempts = [1]\naction = \"close\"").await;
    let (id, shard) = one(&sim, &c, "echo").await;
    let body = serde_json::to_vec(&final_body(&id, 1)).unwrap();
    let started = Instant::now();
    let err = c
        .send_response(Some(&shard), "application/json", body.clone())
        .await
        .unwrap_err();
    assert!(
        !err.is_timeout() && started.elapsed() < Duration::from_secs(2),
        "closed, not timed out: {err}"
    );
    let rec = sim.record();
    assert_eq!(
        (rec.responses[0].fault.clone(), rec.responses[0].status),
        (Some(FaultAction::Close), None)
    );
    assert_eq!(rec.responses[0].body.as_ref(), &body[..]);
    assert_eq!(
        c.respond_bytes(Some(&shard), "application/json", body).await.status(),
        200
    );
    assert_eq!(sim.record().responses[1].attempt, 2);
}

#[tokio::test]
async fn status_faults_answer_that_status_and_leave_the_request_pending() {
    let statuses = [404u16, 408, 429, 500, 502, 503, 504, 400, 401, 413];
    let script: String = statuses
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "[[rule]]\nmatch = {{ order = {} }}\nattempts = [1]\nstatus = {s}\nretry_after = \"{}\"\n",
                i + 1,
                i + 1
            )
        })
        .collect();
    let (sim, c) = start(&script).await;
    for (i, status) in statuses.iter().enumerate() {
        let (id, shard) = one(&sim, &c, "echo").await;
        let resp = c.respond(&shard, &final_body(&id, 1)).await;
        assert_eq!(resp.status().as_u16(), *status);
        assert_eq!(resp.headers()["retry-after"], (i + 1).to_string().as_str());
        assert_eq!(resp.headers()["content-type"], "application/json");
        let code = error_code(resp).await;
        if *status == 404 {
            assert_eq!(code, "pending_request_not_found");
        }
        let retry = c.respond(&shard, &final_body(&id, 1)).await;
        assert_eq!(
            retry.status(),
            200,
            "status {status}: the second attempt is handled normally"
        );
    }
    let rec = sim.record();
    let faulted: Vec<_> = rec
        .responses
        .iter()
        .filter(|r| r.fault.is_some())
        .map(|r| (r.status, r.completed))
        .collect();
    assert_eq!(faulted, statuses.iter().map(|s| (Some(*s), false)).collect::<Vec<_>>());
    assert_eq!(sim.totals().faults_applied, 10);
}

#[tokio::test]
async fn an_http_date_retry_after_is_sent_verbatim() {
    let (sim, c) = start("[[rule]]\nstatus = 503\nretry_after = \"Wed, 21 Oct 2015 07:28:00 GMT\"").await;
    let (id, shard) = one(&sim, &c, "echo").await;
    let resp = c.respond(&shard, &final_body(&id, 1)).await;
    assert_eq!(resp.headers()["retry-after"], "Wed, 21 Oct 2015 07:28:00 GMT");
}

#[tokio::test]
async fn a_delay_fault_answers_normally_after_the_delay() {
    let (sim, c) = start("[[rule]]\nmatch = { resp_type = \"terminal\" }\ndelay = \"300ms\"").await;
    let (id, shard) = one(&sim, &c, "echo").await;
    let started = Instant::now();
    let resp = c.respond(&shard, &final_body(&id, 1)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(resp.status(), 200);
    let r = &sim.record().responses[0];
    assert_eq!(
        (r.fault.clone(), r.completed),
        (Some(FaultAction::Delay(Duration::from_millis(300))), true)
    );
}

#[tokio::test]
async fn rules_select_by_method_tool_and_resp_type() {
    let script =
        "[[rule]]\nmatch = { method = \"tools/call\", tool = \"echo\", resp_type = \"jsonrpc_notify\" }\nstatus = 429";
    let (sim, c) = start(script).await;
    let (echo, echo_shard) = one(&sim, &c, "echo").await;
    let (add, add_shard) = one(&sim, &c, "add").await;
    assert_eq!(c.respond(&echo_shard, &notify_body(&echo)).await.status(), 429);
    assert_eq!(c.respond(&echo_shard, &final_body(&echo, 1)).await.status(), 200);
    assert_eq!(c.respond(&add_shard, &notify_body(&add)).await.status(), 200);
    assert_eq!(c.respond(&add_shard, &final_body(&add, 1)).await.status(), 200);
}

#[tokio::test]
async fn poll_faults_hit_the_nth_poll() {
    let (sim, c) = start("[[poll]]\nnth = 2\nstatus = 500\nretry_after = \"1\"").await;
    assert_eq!(c.poll("limit=1&timeout_ms=1").await.status(), 204);
    let second = c.poll("limit=1&timeout_ms=1").await;
    assert_eq!(second.status(), 500);
    assert_eq!(second.headers()["retry-after"], "1");
    assert_eq!(c.poll("limit=1&timeout_ms=1").await.status(), 204);
    let faults: Vec<_> = sim.record().polls.iter().map(|p| p.fault.is_some()).collect();
    assert_eq!(faults, [false, true, false]);
}

#[tokio::test]
async fn held_and_closed_polls_never_answer() {
    let (sim, c) = start("[[poll]]\nnth = 1\naction = \"hold\"\n[[poll]]\nnth = 2\naction = \"close\"").await;
    let url = c.url("poll?limit=1&timeout_ms=1");
    let held = c
        .http
        .get(&url)
        .bearer_auth(KEY)
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(held.is_timeout(), "{held}");
    let closed = c.http.get(&url).bearer_auth(KEY).send().await.unwrap_err();
    assert!(!closed.is_timeout(), "{closed}");
    assert_eq!(c.poll("limit=1&timeout_ms=1").await.status(), 204);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_poll_can_hand_out_more_commands_than_its_limit() {
    let (sim, c) = start("[[poll]]\nextra_commands = 2").await;
    for i in 0..4 {
        sim.enqueue(NewCommand::jsonrpc(call(i, "echo")));
    }
    let resp = c.poll("limit=1&timeout_ms=100").await;
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["commands"].as_array().unwrap().len(), 3);
    assert_eq!(c.commands().await.len(), 1);
}

#[tokio::test]
async fn feeds_are_queued_at_start_or_after_the_first_post_for_an_order() {
    let script = r#"
[[feed]]
raw = '{"request_id":"req_bad","shard_token":"tok","command_type":"teleport"}'

[[feed]]
jsonrpc = '{"jsonrpc":"2.0","id":9,"method":"ping"}'
response_timeout = "0s"
after_order = 1
"#;
    let (sim, c) = start(script).await;
    let first = c.commands().await;
    assert_eq!(
        first,
        vec![json!({"request_id":"req_bad","shard_token":"tok","command_type":"teleport"})]
    );
    assert!(
        c.poll("limit=5&timeout_ms=200").await.status() == 204,
        "the second feed waits for command 1"
    );
    let resp = c
        .respond(
            "tok",
            &json!({"request_id": "req_bad", "resp_code": 200, "resp_type": "notify_ack"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let fed = c.one_command().await;
    assert_eq!(
        (fed["jsonrpc"]["method"].as_str(), fed["response_timeout"].as_str()),
        (Some("ping"), Some("0s"))
    );
    assert_eq!(
        sim.record()
            .commands
            .iter()
            .map(|c| c.request_id.as_deref())
            .collect::<Vec<_>>(),
        [Some("req_bad"), fed["request_id"].as_str()]
    );
}
