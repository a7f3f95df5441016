//! The pure parts of the channel checks: program resolution, reading an `initialize`
//! answer, and the words for every failed leg.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn file(path: &Path, mode: u32) {
    std::fs::write(path, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_bare_name_resolves_to_the_first_executable_file_on_path() {
    let root = tempfile::tempdir().unwrap();
    let (a, b, c) = (root.path().join("a"), root.path().join("b"), root.path().join("c"));
    for dir in [&a, &b, &c] {
        std::fs::create_dir(dir).unwrap();
    }
    file(&a.join("srv"), 0o644);
    std::fs::create_dir(b.join("srv")).unwrap();
    file(&c.join("srv"), 0o755);
    let path = format!("{}:{}:{}", a.display(), b.display(), c.display());
    assert_eq!(resolve("srv", Some(&path)), Ok(c.join("srv")));
    assert_eq!(
        resolve("srv", Some(&format!("{}:{}", a.display(), b.display()))),
        Err(Unresolved::NoExecPermission(a.join("srv"))),
        "the first refusal is reported when nothing is executable"
    );
    assert_eq!(resolve("nope", Some(&path)), Err(Unresolved::Missing));
}

#[test]
fn a_name_with_a_slash_is_taken_as_written() {
    let root = tempfile::tempdir().unwrap();
    let exe = root.path().join("srv");
    file(&exe, 0o700);
    let exe_str = exe.to_str().unwrap();
    assert_eq!(resolve(exe_str, Some("/nonexistent")), Ok(exe.clone()));
    assert_eq!(
        resolve(root.path().to_str().unwrap(), None),
        Err(Unresolved::Irregular(root.path().to_owned()))
    );
    let missing = root.path().join("missing");
    assert_eq!(resolve(missing.to_str().unwrap(), None), Err(Unresolved::Missing));
    let words = unresolved_words(
        &Unresolved::Missing,
        missing.to_str().unwrap(),
        "mcp.channels.x.command",
    );
    assert!(words.contains("does not exist"), "{words}");
}

#[test]
fn a_missing_program_says_where_it_was_looked_for() {
    let words = unresolved_words(&Unresolved::Missing, "srv", "mcp.channels.tools.command");
    assert!(words.starts_with("`srv` not found on the child's PATH"), "{words}");
    assert!(words.contains("mcp.channels.tools.command"), "{words}");
}

#[test]
fn the_probe_is_an_initialize_request_from_tunnelgate_doctor() {
    let payload = initialize_payload();
    assert!(payload.expects_response());
    assert_eq!(payload.method(), Some("initialize"));
    let v: serde_json::Value = serde_json::from_str(payload.raw().get()).unwrap();
    assert_eq!(v["params"]["protocolVersion"], "2025-06-18");
    assert_eq!(v["params"]["clientInfo"]["name"], "tunnelgate-doctor");
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

#[test]
fn only_a_json_rpc_result_passes_and_only_safe_names_are_kept() {
    let ok = initialized(
        &raw(
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","serverInfo":{"name":"mcp-servers/everything"}}}"#,
        ),
        200,
        "k",
    );
    assert_eq!(
        ok,
        Ok(Initialized {
            protocol: Some("2025-06-18".to_owned()),
            server: Some("mcp-servers/everything".to_owned()),
        })
    );
    let odd = initialized(&raw(r#"{"result":{"serverInfo":{"name":"x\ny <b>"}}}"#), 200, "k").unwrap();
    assert_eq!(odd.server.as_deref(), Some("<other>"));
    assert_eq!(odd.protocol, None);
    let refused = initialized(
        &raw(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"secret-ish text"}}"#),
        400,
        "k",
    )
    .unwrap_err();
    assert!(refused.contains("JSON-RPC error -32602 (HTTP 400)"), "{refused}");
    assert!(!refused.contains("secret-ish"), "the server's message is not repeated");
    let other = initialized(&raw(r#"{"hello":1}"#), 200, "mcp.channels.main.url").unwrap_err();
    assert!(other.contains("not a JSON-RPC response: is mcp.channels.main.url an MCP server?"));
}

#[test]
fn every_leg_failure_has_words_naming_the_key() {
    let key = "mcp.channels.main.url";
    let t = Duration::from_secs(5);
    let cases: [(LegFailure, Verdict, &str); 19] = [
        (LegFailure::Dns, Verdict::Fail, "cannot resolve"),
        (LegFailure::ConnectRefused, Verdict::Fail, "connection refused"),
        (LegFailure::ConnectFailed, Verdict::Fail, "cannot connect"),
        (LegFailure::Tls, Verdict::Fail, "TLS handshake failed"),
        (
            LegFailure::TimeoutAfterWrite,
            Verdict::Fail,
            "no answer to initialize within 5s",
        ),
        (
            LegFailure::DeadlineBeforeSend,
            Verdict::Fail,
            "no answer to initialize within 5s",
        ),
        (LegFailure::ConnectionLost, Verdict::Fail, "failed before an answer"),
        (LegFailure::HttpStatus(401), Verdict::Warn, "wants credentials"),
        (
            LegFailure::HttpStatus(404),
            Verdict::Fail,
            "HTTP 404 without a JSON-RPC answer",
        ),
        (LegFailure::NonProtocolResponse, Verdict::Fail, "not JSON-RPC"),
        (LegFailure::TruncatedJson, Verdict::Fail, "not whole JSON"),
        (
            LegFailure::StreamClosedBeforeResponse,
            Verdict::Fail,
            "ended before the initialize answer",
        ),
        (LegFailure::BodyTooLarge, Verdict::Fail, "larger than 1024 KiB"),
        (LegFailure::ChildNotRunning, Verdict::Fail, "could not be started"),
        (LegFailure::ChildExited, Verdict::Fail, "exited before answering"),
        (LegFailure::ChildPipeBroken, Verdict::Fail, "closed its stdin"),
        (LegFailure::NotAdmitted, Verdict::Fail, "internal"),
        (LegFailure::CancelledAfterWrite, Verdict::Fail, "internal"),
        (LegFailure::InternalAfterWrite, Verdict::Fail, "internal"),
    ];
    for (failure, verdict, words) in cases {
        let (got, detail) = leg_words(&failure, key, t);
        assert_eq!(got, verdict, "{failure:?}");
        assert!(detail.contains(words), "{failure:?}: {detail}");
        let internal = matches!(
            failure,
            LegFailure::NotAdmitted | LegFailure::CancelledAfterWrite | LegFailure::InternalAfterWrite
        );
        assert!(internal || detail.contains(key), "{failure:?} names no key: {detail}");
    }
}
