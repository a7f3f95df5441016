//! The official client's health routes on the ops listener (`/health`,
//! `/health?details=...`, `/health/{component}`), through the binary: the shapes a
//! monitor written for the official client reads, filled from tunnelgate's own state,
//! and every refusal of a malformed request.

use serde_json::Value;

use crate::harness::{http_client, Gateway, Rig, RigOptions};

async fn get(rig: &Rig, path: &str) -> (u16, String, String, String) {
    let resp = http_client()
        .get(format!("http://127.0.0.1:{}{path}", rig.ops_port))
        .send()
        .await
        .expect("the ops listener answers");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (content_type, cache) = (header("content-type"), header("cache-control"));
    let status = resp.status().as_u16();
    (status, content_type, cache, resp.text().await.unwrap())
}

#[tokio::test]
async fn health_answers_in_the_official_shapes_and_refuses_what_it_does_not_take() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    rig.wait("two polls", |r| r.polls.len() >= 2).await;

    let (status, content_type, cache, body) = get(&rig, "/health").await;
    assert_eq!(
        (status, content_type.as_str(), cache.as_str()),
        (200, "application/json", "no-store")
    );
    let keys: Vec<&str> = body
        .trim_start_matches('{')
        .split(",\"")
        .filter_map(|k| k.trim_start_matches('"').split('"').next())
        .take(5)
        .collect();
    assert_eq!(
        keys,
        ["schema_version", "live", "ready", "snapshot_at", "runtime"],
        "{body}"
    );
    let compact: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(compact["live"], true);
    assert!(compact.get("components").is_none(), "compact by default: {compact}");
    assert_eq!(compact["runtime"]["flavor"], "tunnelgate");
    assert_eq!(compact["runtime"]["lifecycle"], "running", "{compact}");
    let instance = rig.sim.record().polls[0]
        .header("x-tunnel-client-instance-id")
        .unwrap()
        .to_owned();
    assert_eq!(compact["runtime"]["instance_id"], instance.as_str());

    let (status, _, _, body) = get(&rig, "/health?details=true").await;
    assert_eq!(status, 200);
    let detailed: Value = serde_json::from_str(&body).unwrap();
    let components = detailed["components"].as_object().unwrap();
    let names: Vec<&String> = components.keys().collect();
    assert_eq!(
        names,
        [
            "control-plane",
            "coordination",
            "dispatcher",
            "harpoon",
            "mcp",
            "response-delivery"
        ]
    );
    assert_eq!(components["control-plane"]["status"], "ok", "{detailed}");
    assert_eq!(components["control-plane"]["state"], "polling");
    assert_eq!(components["coordination"]["status"], "disabled");
    assert_eq!(components["dispatcher"]["details"]["mode"], "default");

    let (status, _, cache, body) = get(&rig, "/health/mcp").await;
    assert_eq!((status, cache.as_str()), (200, "no-store"));
    let mcp: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(mcp["schema_version"], 1);
    assert_eq!(mcp["component"], "mcp");
    assert_eq!(mcp["details"]["channels"][0]["channel"], "main", "{mcp}");

    for (path, code) in [
        ("/health?details=maybe", 400),
        ("/health?details=true&details=false", 400),
        ("/health?details=", 400),
        ("/health?verbose=1", 400),
        ("/health/mcp?details=true", 400),
        ("/health/nope", 404),
    ] {
        assert_eq!(get(&rig, path).await.0, code, "{path}");
    }
    let post = http_client()
        .post(format!("http://127.0.0.1:{}/health", rig.ops_port))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status().as_u16(), 405);
    assert_eq!(post.headers()["allow"], "GET");
    gw.sigterm();
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)).await, Some(0));
}

#[tokio::test]
async fn the_official_variable_shows_the_details_by_default_and_details_false_still_hides_them() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default_mode());
    let mut gw = Gateway::spawn(&["run"], Some(&config), &[("HEALTH_SHOW_DETAILS", "true")]);
    gw.wait_http_ready(
        &format!("http://127.0.0.1:{}/livez", rig.ops_port),
        std::time::Duration::from_secs(20),
    )
    .await;
    let (_, _, _, body) = get(&rig, "/health").await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc["components"].is_object(), "{doc}");
    let (_, _, _, body) = get(&rig, "/health?details=false").await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc.get("components").is_none(), "{doc}");
    let bad = Gateway::cli(
        &["check"],
        Some(&config),
        &[("HEALTH_SHOW_DETAILS", "maybe")],
        std::time::Duration::from_secs(20),
    )
    .await;
    assert_eq!(bad.code, 78, "{}", bad.stderr);
    assert!(bad.stderr.contains("HEALTH_SHOW_DETAILS"), "{}", bad.stderr);
    gw.sigterm();
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)).await, Some(0));
}
