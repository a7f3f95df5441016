//! What the simulator keeps is bounded, and refused callers never make it read a body.

use serde_json::json;

use super::*;
use crate::NewCommand;

fn bounded(record: usize, completed: usize) -> SimConfig {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.record_capacity = record;
    config.completed_capacity = completed;
    config
}

#[tokio::test]
async fn the_record_and_the_completed_requests_stay_at_their_bound() {
    let (sim, c) = start_with(bounded(3, 2)).await;
    let request_ids: Vec<String> = (0..5)
        .map(|i| sim.enqueue(NewCommand::jsonrpc(call(i, "echo"))))
        .collect();
    let mut shards = Vec::new();
    while shards.len() < request_ids.len() {
        for cmd in c.commands().await {
            shards.push(ids(&cmd).1);
        }
    }
    for (i, (id, shard)) in request_ids.iter().zip(&shards).enumerate() {
        let resp = c.respond(shard, &final_body(id, i64::try_from(i).unwrap())).await;
        assert_eq!(resp.status(), 200);
    }

    let rec = sim.record();
    assert_eq!(rec.commands.len(), 3);
    assert_eq!(rec.dropped.commands, 2);
    assert_eq!(
        rec.commands.iter().map(|c| c.request_id.as_deref()).collect::<Vec<_>>(),
        request_ids[2..].iter().map(|id| Some(id.as_str())).collect::<Vec<_>>(),
        "the oldest entries are dropped first"
    );
    assert!(rec.commands.iter().all(|c| c.issued));
    assert_eq!(rec.responses.len(), 3);
    assert_eq!(rec.dropped.responses, 2);
    assert!(rec.responses.iter().all(|r| r.completed && r.status == Some(200)));
    assert!(rec.polls.len() <= 3);
    assert_eq!(
        sim.shared.requests_kept(),
        2,
        "only the 2 latest completed requests are kept"
    );

    // Forgotten or remembered, a completed request answers a repeated POST with 404.
    for (i, (id, shard)) in request_ids.iter().zip(&shards).enumerate() {
        let again = c.respond(shard, &final_body(id, i64::try_from(i).unwrap())).await;
        assert_eq!(again.status(), 404, "{id}");
    }
    let rec = sim.record();
    assert_eq!((rec.responses.len(), rec.dropped.responses), (3, 7));
    assert_eq!(sim.shared.requests_kept(), 2);
    let totals = sim.totals();
    assert_eq!((totals.issued, totals.responses, totals.completed), (5, 10, 5));
}

#[tokio::test]
async fn a_response_post_without_credentials_is_refused_before_its_body_is_read() {
    let (sim, _c) = start("").await;
    let path = format!("/v1/tunnels/{TUNNEL}/response");
    let no_key = status_before_the_body(&sim, &format!("POST {path} HTTP/1.1")).await;
    assert!(no_key.starts_with("HTTP/1.1 401"), "{no_key}");
    let no_shard = status_before_the_body(&sim, &format!("POST {path} HTTP/1.1\r\nAuthorization: Bearer {KEY}")).await;
    assert!(no_shard.starts_with("HTTP/1.1 401"), "{no_shard}");
    let other_tunnel = status_before_the_body(
        &sim,
        &format!(
            "POST /v1/tunnels/tunnel_99999999999999999999999999999999/response HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\nX-Tunnel-Shard-Token: s"
        ),
    )
    .await;
    assert!(other_tunnel.starts_with("HTTP/1.1 404"), "{other_tunnel}");

    let rec = sim.record();
    assert_eq!(
        rec.responses.iter().map(|r| r.status).collect::<Vec<_>>(),
        [Some(401), Some(401), Some(404)]
    );
    assert!(rec.responses.iter().all(|r| r.body.is_empty()), "no body was read");

    // With the credentials, the same request waits for its body.
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {KEY}\r\nX-Tunnel-Shard-Token: s\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::io::AsyncReadExt::read(&mut stream, &mut byte),
    )
    .await;
    assert!(
        waited.is_err(),
        "an authorized POST is answered only once its body is read"
    );
}

#[tokio::test]
async fn the_ingress_refuses_another_tunnel_before_reading_the_body() {
    let (sim, _c) = start("").await;
    let status = status_before_the_body(&sim, "POST /v1/mcp/tunnel_99999999999999999999999999999999 HTTP/1.1").await;
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    assert!(sim.record().commands.is_empty());
}

#[tokio::test]
async fn an_ingress_body_over_the_bound_is_refused() {
    let (sim, _c) = start("").await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(3 * 1024 * 1024)}});
    let resp = reqwest::Client::new()
        .post(sim.ingress_url())
        .json(&big)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert!(sim.record().commands.is_empty());
}
