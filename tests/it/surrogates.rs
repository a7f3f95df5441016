//! An MCP server's message carrying an escaped lone surrogate (`"\ud800"`: valid JSON,
//! not valid Unicode), which the control plane refuses finally (`400
//! invalid_json_payload`): the gateway never posts it. A terminal answer is replaced by a
//! `-32603` that says, in words, that the request ran and its answer could not be carried;
//! a notification is dropped and the notifications and the answer after it still go.
//!
//! Through the binary, with the stdio echo peer (Python): it echoes `arguments.text` and
//! sends a `notifications/progress` carrying the request's progress token, and Python's
//! `json.dumps` writes a lone surrogate as the escape the service refuses.

use serde_json::Value;
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, peer_script, python, Rig, RigOptions};
use crate::stdio_sessions::stdio_config;

#[tokio::test]
async fn an_answer_and_a_notification_with_a_lone_surrogate_are_never_posted_and_the_caller_is_told_in_words() {
    let rig = Rig::start("").await;
    let argv = vec![
        python().display().to_string(),
        peer_script("stdio/echo.py").display().to_string(),
    ];
    let mut gw = rig
        .spawn_gateway(&stdio_config(&rig, &argv, "", &RigOptions::default_mode()))
        .await;
    let raw = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\ud800b"},"_meta":{"progressToken":"t\udc00"}}}"#;
    let lone = rig.sim.enqueue(NewCommand::jsonrpc_raw(
        serde_json::value::RawValue::from_string(raw.to_owned()).unwrap(),
    ));
    let fine = rig.sim.enqueue(NewCommand::jsonrpc(
        serde_json::json!({"jsonrpc":"2.0","id":8,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"\u{1F600}"},"_meta":{"progressToken":"ok"}}}),
    ));
    let rec = rig
        .wait("both answered", |r| r.is_completed(&lone) && r.is_completed(&fine))
        .await;
    let told = final_json(&rec, &lone);
    assert_eq!(told["resp_code"], 502, "{told}");
    assert_eq!(told["resp_json"]["id"], 7, "{told}");
    assert_eq!(told["resp_json"]["error"]["code"], -32603, "{told}");
    let words = told["resp_json"]["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("not valid Unicode") && words.contains("a retry would run it again"),
        "{words}"
    );
    assert!(
        rec.responses_for(&lone).all(|r| r.status == Some(200)),
        "nothing was refused: nothing refusable was sent"
    );
    assert!(
        !rec.responses_for(&lone)
            .any(|r| r.resp_type.as_deref() == Some("jsonrpc_notify")),
        "the notification was dropped"
    );
    // A valid pair, and a plain notification, go as they are.
    let fine_answer = final_json(&rec, &fine);
    assert_eq!(fine_answer["resp_json"]["result"]["content"][0]["text"], "\u{1F600}");
    assert!(rec
        .responses_for(&fine)
        .any(|r| r.resp_type.as_deref() == Some("jsonrpc_notify")));
    let metrics = rig.metrics().await;
    for line in [
        r#"tunnelgate_invalid_json_payloads_total{kind="terminal"} 1"#,
        r#"tunnelgate_invalid_json_payloads_total{kind="notify"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    rig.assert_all_bodies_valid();
    let receipts: Value = rig.status().await;
    assert_eq!(receipts["fatal"], Value::Null);
    gw.sigterm();
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)).await, Some(0));
}
