//! Resume through a cutting proxy: server-everything stamps SSE event ids; the proxy cuts
//! the first response stream after a progress event, and the gateway recovers the real
//! response with a `GET` carrying `Last-Event-ID`, never re-posting the request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::json;
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, spawn_server_everything_http, Rig, RigOptions};

#[derive(Clone)]
struct Proxy {
    upstream: String,
    client: reqwest::Client,
    /// (method, has Last-Event-ID, body excerpt) of every request seen.
    seen: Arc<Mutex<Vec<(String, bool, String)>>>,
    cut_done: Arc<Mutex<bool>>,
}

async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    let method = req.method().clone();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body).into_owned();
    p.seen
        .lock()
        .unwrap()
        .push((method.to_string(), headers.contains_key("last-event-id"), text.clone()));
    let mut upstream = p.client.request(method.clone(), &p.upstream).body(body.to_vec());
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            upstream = upstream.header(name, value);
        }
    }
    let resp = match upstream.send().await {
        Ok(r) => r,
        Err(_) => return Response::builder().status(502).body(Body::empty()).unwrap(),
    };
    let mut builder = Response::builder().status(resp.status().as_u16());
    for (name, value) in resp.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            builder = builder.header(name, value);
        }
    }
    let cut_this = method == "POST" && text.contains("trigger-long-running-operation") && !*p.cut_done.lock().unwrap();
    let mut stream = resp.bytes_stream();
    let cut_done = p.cut_done.clone();
    let body = async_stream(
        move |tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>| async move {
            let mut buffered = String::new();
            while let Some(chunk) = stream.next().await {
                let Ok(chunk) = chunk else { return };
                buffered.push_str(&String::from_utf8_lossy(&chunk));
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
                if cut_this && buffered.contains("notifications/progress") && buffered.ends_with("\n\n") {
                    // End the stream after the first progress event: the response is still to come.
                    *cut_done.lock().unwrap() = true;
                    return;
                }
            }
        },
    );
    builder.body(body).unwrap()
}

/// A body fed by a producer task.
fn async_stream<F, Fut>(producer: F) -> Body
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(producer(tx));
    Body::from_stream(tokio_stream_from(rx))
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_cut_stream_from_server_everything_is_recovered_by_resume_without_a_replay() {
    let (_server, upstream) = spawn_server_everything_http().await;
    let proxy = Proxy {
        upstream,
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
        seen: Arc::default(),
        cut_done: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/mcp", axum::routing::any(forward))
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    ));
    let rec = rig.wait("initialize", |r| r.is_completed(&init)).await;
    let session = final_json(&rec, &init)["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let with = |c: NewCommand| {
        c.header("Mcp-Session-Id", session.clone())
            .header("Mcp-Protocol-Version", "2025-06-18")
    };
    let note = rig.sim.enqueue(with(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )));
    rig.wait("initialized", |r| r.is_completed(&note)).await;
    let long = rig.sim.enqueue(with(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":4},"_meta":{"progressToken":"t"}}}))));
    let rec = rig
        .sim
        .wait_for("the long operation answered", Duration::from_secs(15), |r| {
            r.is_completed(&long)
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nproxy saw: {:?}\ngateway:\n{}",
                proxy.seen.lock().unwrap(),
                gw.stderr()
            )
        });

    assert!(*proxy.cut_done.lock().unwrap(), "the proxy cut the first stream");
    let body = final_json(&rec, &long);
    assert_eq!(body["resp_type"], "jsonrpc_response");
    assert!(
        body["resp_json"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Long running operation completed"),
        "{body}"
    );
    let seen = proxy.seen.lock().unwrap().clone();
    let posts = seen
        .iter()
        .filter(|(m, _, b)| m == "POST" && b.contains("trigger-long-running-operation"))
        .count();
    let resumes = seen.iter().filter(|(m, resumed, _)| m == "GET" && *resumed).count();
    assert_eq!(posts, 1, "the request is never sent twice");
    assert!(
        resumes >= 1,
        "a GET with Last-Event-ID recovered the response: {seen:?}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(20)).await, Some(0));
}
