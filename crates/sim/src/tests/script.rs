//! Fault-script parsing: the documented example, and errors that name the entry.

use std::time::Duration;

use crate::fault::{Attempts, FeedCommand, PostView, RespTypeSelector};
use crate::protocol::RespType;
use crate::{FaultAction, FaultScript, FaultScriptError};

/// The TOML example in the crate header (`lib.rs`), so the documentation cannot rot.
fn documented_example() -> String {
    let source = include_str!("../lib.rs");
    let block = source.split("```toml\n").nth(1).expect("the header has a toml example");
    let block = block.split("//! ```").next().expect("the example is closed");
    block
        .lines()
        .map(|l| l.strip_prefix("//! ").or_else(|| l.strip_prefix("//!")).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_documented_example_parses() {
    let script = FaultScript::from_toml_str(&documented_example()).unwrap();
    assert_eq!(script.rules.len(), 2);
    let r = &script.rules[0];
    assert_eq!(
        (r.select.order, r.select.resp_type),
        (Some(1), Some(RespTypeSelector::Terminal))
    );
    assert_eq!(r.attempts, Attempts::Only(vec![1]));
    assert_eq!(
        r.action,
        FaultAction::Status {
            status: 503,
            retry_after: Some("1".into())
        }
    );
    assert_eq!(
        (script.rules[1].select.tool.as_deref(), &script.rules[1].action),
        (Some("slow"), &FaultAction::Hold)
    );
    assert_eq!(script.polls.len(), 2);
    assert_eq!(script.polls[1].extra_commands, 3);
    assert_eq!(script.feed.len(), 2);
    assert!(matches!(script.feed[0].command, FeedCommand::Raw(_)));
    let FeedCommand::Built(cmd) = &script.feed[1].command else {
        panic!("built")
    };
    assert_eq!(
        (cmd.response_timeout.as_deref(), script.feed[1].after_order),
        (Some("0s"), Some(1))
    );
}

#[test]
fn delays_use_humantime_durations() {
    let script = FaultScript::from_toml_str("[[rule]]\ndelay = \"1s 500ms\"").unwrap();
    assert_eq!(script.rules[0].action, FaultAction::Delay(Duration::from_millis(1500)));
    assert_eq!(script.rules[0].attempts, Attempts::All);
}

#[test]
fn invalid_scripts_name_the_entry_and_the_problem() {
    let cases = [
        ("[[rule]]\naction = \"hold\"\nstatus = 503", "rule 1", "exactly one"),
        ("[[rule]]\nmatch = {}", "rule 1", "give one of"),
        ("[[rule]]\nstatus = 200", "rule 1", "status 200"),
        ("[[rule]]\naction = \"explode\"", "rule 1", "explode"),
        (
            "[[rule]]\naction = \"hold\"\n[[rule]]\nattempts = [0]\naction = \"close\"",
            "rule 2",
            "1-based",
        ),
        ("[[rule]]\nattempts = \"some\"\naction = \"close\"", "rule 1", "some"),
        (
            "[[rule]]\nmatch = { resp_type = \"final\" }\naction = \"close\"",
            "rule 1",
            "final",
        ),
        ("[[rule]]\ndelay = \"soon\"", "rule 1", "soon"),
        (
            "[[rule]]\nretry_after = \"1\"\naction = \"hold\"",
            "rule 1",
            "retry_after",
        ),
        ("[[poll]]\nnth = 1", "poll 1", "extra_commands"),
        ("[[feed]]\nraw = 'nope'", "feed 1", "raw is not JSON"),
        ("[[feed]]\nraw = '{}'\nchannel = \"x\"", "feed 1", "verbatim"),
        ("[[feed]]\nafter_order = 1", "feed 1", "give raw"),
    ];
    for (text, entry, problem) in cases {
        let err = FaultScript::from_toml_str(text).expect_err(text).to_string();
        assert!(err.contains(entry) && err.contains(problem), "{text}: {err}");
    }
}

#[test]
fn unknown_keys_are_syntax_errors() {
    for text in [
        "[[rules]]\naction = \"hold\"",
        "[[rule]]\nacton = \"hold\"",
        "[[rule]]\nmatch = { ordr = 1 }\naction = \"hold\"",
    ] {
        let err = FaultScript::from_toml_str(text).expect_err(text);
        assert!(matches!(err, FaultScriptError::Syntax(_)), "{text}: {err:?}");
    }
}

#[test]
fn matching_needs_every_selector_and_the_attempt() {
    let script = FaultScript::from_toml_str(
        "[[rule]]\nmatch = { order = 2, tool = \"echo\", resp_type = \"jsonrpc_response\" }\nattempts = [2, 3]\naction = \"close\"\n\
         [[rule]]\nmatch = { resp_type = \"jsonrpc_notify\" }\naction = \"hold\"",
    )
    .unwrap();
    let post = |order, tool, resp_type, attempt| PostView {
        order: Some(order),
        method: Some("tools/call"),
        tool: Some(tool),
        resp_type: Some(resp_type),
        attempt,
    };
    assert_eq!(
        script.response_fault(&post(2, "echo", RespType::JsonrpcResponse, 2)),
        Some(&FaultAction::Close)
    );
    assert_eq!(
        script.response_fault(&post(2, "echo", RespType::JsonrpcResponse, 1)),
        None
    );
    assert_eq!(
        script.response_fault(&post(1, "echo", RespType::JsonrpcResponse, 2)),
        None
    );
    assert_eq!(
        script.response_fault(&post(2, "add", RespType::JsonrpcResponse, 2)),
        None
    );
    assert_eq!(script.response_fault(&post(2, "echo", RespType::NotifyAck, 2)), None);
    assert_eq!(
        script.response_fault(&post(5, "add", RespType::JsonrpcNotify, 1)),
        Some(&FaultAction::Hold)
    );
    assert_eq!(
        script.response_fault(&PostView::default()),
        None,
        "a resp_type selector needs a resp_type"
    );
}

#[test]
fn poll_plans_take_the_first_action_and_the_largest_extra() {
    let script = FaultScript::from_toml_str(
        "[[poll]]\nnth = 3\nstatus = 429\n[[poll]]\naction = \"hold\"\nnth = 3\n[[poll]]\nextra_commands = 2\n[[poll]]\nnth = 1\nextra_commands = 5",
    )
    .unwrap();
    let third = script.poll_plan(3);
    assert_eq!(
        third.action,
        Some(FaultAction::Status {
            status: 429,
            retry_after: None
        })
    );
    assert_eq!(third.extra_commands, 2);
    assert_eq!(script.poll_plan(1).extra_commands, 5);
    assert_eq!(script.poll_plan(2).action, None);
}
