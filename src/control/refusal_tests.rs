//! Why a response POST was refused, on real sockets: a `413` (the
//! contract's `request_body_too_large`) is reported as too large, with the delivery still
//! `rejected` and never retried; other refusals carry no reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use super::{AttemptResult, ControlClient, ControlSettings, Delivery, PostKind, Refused};
use crate::app::GatewayLabels;
use crate::protocol::ShardToken;
use crate::telemetry::Metrics;

/// A loopback control plane that reads each POST whole and answers `status` with `body`;
/// its URL and how many requests it answered.
async fn refusing_server(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    async move {
                        drop(request.into_body().collect().await);
                        let answer = http::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(Bytes::from_static(body.as_bytes())))
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(answer)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                drop(
                    builder
                        .serve_connection(hyper_util::rt::TokioIo::new(conn), service)
                        .await,
                );
            });
        }
    });
    (url, answered)
}

/// The client for `base_url`, three attempts allowed.
fn client_for(base_url: &str) -> ControlClient {
    let settings = ControlSettings {
        base_url: base_url.to_owned(),
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(1),
        post_timeout: Duration::from_secs(5),
        post_attempts: 3,
        server_info: None,
        routing_correction: false,
        initial_poll_timeout: None,
        http2: false,
    };
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    ControlClient::new(settings, "i", metrics).unwrap()
}

async fn deliver(client: &ControlClient) -> super::DeliveryReport {
    let body = Bytes::from(format!(
        r#"{{"request_id":"r","channel":"main","resp_code":200,"resp_type":"jsonrpc_response","resp_json":{{"jsonrpc":"2.0","id":1,"result":{{"pad":"{}"}}}}}}"#,
        "x".repeat(100_000)
    ));
    client
        .deliver(
            PostKind::Terminal,
            body,
            &ShardToken::new("s"),
            None,
            &CancellationToken::new(),
        )
        .await
}

#[tokio::test]
async fn a_413_is_rejected_once_and_reported_too_large() {
    let too_large = r#"{"error":{"message":"too large","type":"invalid_request_error","param":null,"code":"request_body_too_large"}}"#;
    for bare in [too_large, "<html>413 Request Entity Too Large</html>"] {
        let (url, answered) = refusing_server(413, bare).await;
        let report = deliver(&client_for(&url)).await;
        assert_eq!(report.delivery, Delivery::Rejected);
        assert_eq!(report.last_attempt, AttemptResult::RejectedStatus);
        assert_eq!(report.refused, Some(Refused::TooLarge), "{bare}");
        assert_eq!(report.attempts, 1, "the same body is never sent again");
        assert_eq!(answered.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn another_refusal_carries_no_reason() {
    let invalid =
        r#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":"invalid_json_payload"}}"#;
    let (url, _) = refusing_server(400, invalid).await;
    let report = deliver(&client_for(&url)).await;
    assert_eq!(report.delivery, Delivery::Rejected);
    assert_eq!(report.refused, None);
}
