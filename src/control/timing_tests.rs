//! Delivery timing on tokio's paused clock: post timeouts, the command's deadline and
//! cancellation end a delivery exactly when they should, with no wall-clock waits.
//!
//! The peer is a loopback server that reads each POST and never answers (a held
//! acknowledgement), so every attempt can only end by a bound.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{AttemptResult, ControlClient, ControlSettings, Delivery, PostKind};
use crate::app::GatewayLabels;
use crate::protocol::ShardToken;
use crate::telemetry::Metrics;

/// Accepts connections and reads forever; never writes a byte back.
async fn holding_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    format!("http://{addr}")
}

async fn client(post_timeout: Duration, post_attempts: u32) -> (ControlClient, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    let settings = ControlSettings {
        base_url: holding_server().await,
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(30),
        post_timeout,
        post_attempts,
        server_info: None,
        routing_correction: false,
        initial_poll_timeout: None,
        http2: false,
    };
    (ControlClient::new(settings, "i", metrics.clone()).unwrap(), metrics)
}

fn body() -> Bytes {
    Bytes::from_static(br#"{"request_id":"r","channel":"main","resp_code":200,"resp_type":"notify_ack"}"#)
}

#[tokio::test(start_paused = true)]
async fn a_held_terminal_post_is_retried_until_the_command_deadline_and_ends_exactly_there() {
    let (control, _) = client(Duration::from_secs(10), 3).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(15);
    let report = control
        .deliver(
            PostKind::Terminal,
            body(),
            &ShardToken::new("s"),
            Some(deadline),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(report.delivery, Delivery::Ambiguous);
    assert_eq!(report.last_attempt, AttemptResult::Timeout);
    // 10 s for the first attempt, then a backoff, then the second is cut by the deadline.
    assert_eq!(report.attempts, 2);
    assert_eq!(started.elapsed(), Duration::from_secs(15));
}

#[tokio::test(start_paused = true)]
async fn without_a_deadline_each_attempt_ends_at_its_post_timeout_and_the_budget_is_spent() {
    let (control, metrics) = client(Duration::from_secs(4), 3).await;
    let started = Instant::now();
    let report = control
        .deliver(
            PostKind::Terminal,
            body(),
            &ShardToken::new("s"),
            None,
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(report.delivery, Delivery::Ambiguous);
    assert_eq!(report.attempts, 3);
    // Three 4 s attempts and two backoffs of at most 5 s each.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(12) && elapsed <= Duration::from_secs(22),
        "{elapsed:?}"
    );
    assert!(metrics
        .render()
        .contains("tunnelgate_delivery_attempts_total{kind=\"terminal\",result=\"timeout\"} 3"));
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_an_attempt_settles_the_delivery_at_that_instant() {
    let (control, _) = client(Duration::from_secs(10), 3).await;
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            cancel.cancel();
        }
    });
    let started = Instant::now();
    let report = control
        .deliver(PostKind::Terminal, body(), &ShardToken::new("s"), None, &cancel)
        .await;
    assert_eq!(report.last_attempt, AttemptResult::Cancelled);
    assert_eq!(report.delivery, Delivery::Ambiguous);
    assert_eq!(report.attempts, 1);
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_delivery_cancelled_before_it_began_counts_no_attempt() {
    let (control, metrics) = client(Duration::from_secs(10), 3).await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let report = control
        .deliver(PostKind::Terminal, body(), &ShardToken::new("s"), None, &cancel)
        .await;
    assert_eq!(report.attempts, 0);
    assert_eq!(report.last_attempt, AttemptResult::Cancelled);
    assert!(metrics
        .render()
        .contains("tunnelgate_delivery_attempts_total{kind=\"terminal\",result=\"cancelled\"} 0"));
}
