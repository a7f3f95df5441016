//! `GET /events`: the log ring of a real gateway holds what its log printed, with the
//! command span's fields, and never a configured secret or a payload.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{http_client, secrets_in, wait_for, Rig, RigOptions, KEY};

const PAYLOAD_CANARY: &str = "PAYLOAD-CANARY-4417";
const HEADER_CANARY: &str = "CMD-HEADER-CANARY-4418";
const CP_HEADER_CANARY: &str = "CP-HEADER-CANARY-4419";
const MCP_HEADER_CANARY: &str = "MCP-HEADER-CANARY-4420";

async fn get(url: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = http_client().get(url).send().await.expect("the ops listener answers");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap_or_default())
}

/// The printed line that carries `event`: same level, target and message, and every
/// field of the event with the same value among the line's fields or its span's.
fn printed_as(event: &Value, lines: &[Value]) -> bool {
    lines.iter().any(|line| {
        line["level"] == event["level"]
            && line["target"] == event["target"]
            && line["fields"]["message"].as_str().unwrap_or("") == event["message"]
            && event["fields"].as_array().unwrap().iter().all(|f| {
                let name = f["name"].as_str().unwrap();
                let shown = line["fields"].get(name).or_else(|| line["span"].get(name));
                shown.is_some_and(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned) == f["value"])
            })
    })
}

#[tokio::test]
async fn events_hold_what_the_log_printed_with_the_command_span_and_no_secret() {
    let rig = Rig::start("").await;
    let config = rig
        .config(&RigOptions {
            extra: &format!(
                "[control_plane.headers]\nX-Gateway-Key = \"{CP_HEADER_CANARY}\"\n\
                 [mcp.channels.main.headers]\nAuthorization = \"Bearer {MCP_HEADER_CANARY}\"\n"
            ),
            ..RigOptions::default_mode()
        })
        .replace("log_level = \"info\"", "log_level = \"debug\"");
    let mut gw = rig.spawn_gateway(&config).await;
    let call = |channel: &str| {
        rig.sim.enqueue(
            tunnelgate_sim::NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":"rpc-e","method":"tools/call",
                "params":{"name":"echo","arguments":{"message": PAYLOAD_CANARY}}}))
            .channel(channel)
            .header("Authorization", format!("Bearer {HEADER_CANARY}")),
        )
    };
    let served = call("main");
    let unroutable = call("nowhere");
    rig.wait("both answered", |r| {
        r.is_completed(&served) && r.is_completed(&unroutable)
    })
    .await;
    let url = format!("http://127.0.0.1:{}/events", rig.ops_port);
    let doc: Value = wait_for(
        "the unroutable command's warning in /events",
        Duration::from_secs(10),
        || async {
            let (_, _, body) = get(&url).await;
            let doc: Value = serde_json::from_str(&body).ok()?;
            let logged = doc["events"].as_array()?.iter().any(|e| {
                e["fields"].as_array().is_some_and(|f| {
                    f.iter()
                        .any(|f| f["name"] == "tunnelgate.request_id" && f["value"] == unroutable)
                })
            });
            logged.then_some(doc)
        },
    )
    .await;
    assert_eq!(doc["capacity"], 2000, "{doc}");
    assert_eq!(doc["dropped"], 0);
    let events = doc["events"].as_array().unwrap();
    assert_eq!(doc["held"], events.len());
    assert!(events.iter().any(|e| e["message"] == "gateway starting"), "{doc}");
    let warning = events
        .iter()
        .find(|e| e["level"] == "WARN" && e["message"].as_str().unwrap().contains("no channel of that name"))
        .unwrap_or_else(|| panic!("the unroutable warning: {doc}"));
    let field = |name: &str| {
        warning["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["value"].clone())
    };
    assert_eq!(field("tunnelgate.channel"), Some(json!("nowhere")));
    assert_eq!(field("mcp.method.name"), Some(json!("tools/call")));
    assert!(warning["time"].as_str().unwrap().ends_with('Z'));

    let (status, headers, one) = get(&format!("{url}?limit=1")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["events"].as_array().unwrap().len(), 1);
    let (status, _, reason) = get(&format!("{url}?limit=many")).await;
    assert_eq!(
        (status, reason.as_str()),
        (400, "limit \"many\" is not a whole number of events\n")
    );

    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(15)).await, Some(0));
    let lines: Vec<Value> = gw
        .stderr()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for event in events {
        assert!(
            printed_as(event, &lines),
            "not printed as held: {event}\n{}",
            gw.stderr()
        );
    }
    let text = doc.to_string();
    let canaries = [PAYLOAD_CANARY, HEADER_CANARY, CP_HEADER_CANARY, MCP_HEADER_CANARY, KEY];
    for canary in canaries {
        assert!(!text.contains(canary), "{canary:?} leaked into /events:\n{text}");
    }
    // As the support bundle's scan looks: also for key and credential shapes.
    assert_eq!(secrets_in(&text, &canaries), [] as [&str; 0], "{text}");
}
