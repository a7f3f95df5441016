//! Every route, each from a command as the wire carries it.

use std::time::Duration;

use super::*;
use crate::protocol::decode_poll;

fn command(command_type: &str, channel: &str, jsonrpc: Option<&str>, timeout: Option<&str>) -> Command {
    let jsonrpc = jsonrpc.map(|j| format!(r#","jsonrpc":{j}"#)).unwrap_or_default();
    let timeout = timeout
        .map(|t| format!(r#","response_timeout":"{t}""#))
        .unwrap_or_default();
    let body = format!(
        r#"{{"commands":[{{"request_id":"r1","shard_token":"s","command_type":"{command_type}","channel":"{channel}","headers":{{}}{jsonrpc}{timeout}}}]}}"#
    );
    decode_poll(body.as_bytes())
        .expect("a list decodes")
        .pop()
        .expect("one command")
        .expect("a valid command")
}

/// `main` (HTTP) and `local` (stdio) are configured.
fn main_only(name: &str) -> Option<&'static str> {
    match name {
        "main" => Some("main-transport"),
        "local" => Some("stdio-transport"),
        "harpoon" => Some("builtin-empty"),
        _ => None,
    }
}

impl Routable for &'static str {
    fn serves_discovery(&self) -> bool {
        !self.starts_with("stdio") && !self.starts_with("builtin")
    }

    fn is_routable(&self) -> bool {
        !self.ends_with("-empty")
    }
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
const LISTEN: &str = r#"{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen"}"#;
const REPLY: &str = r#"{"jsonrpc":"2.0","id":"srv-1","result":{}}"#;
const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#;

/// A short label per route, for the table.
fn label<T>(r: &Route<'_, T>) -> &'static str {
    match r {
        Route::UnknownType(_) => "unknown_type",
        Route::UnknownRequest(_) => "unknown_request",
        Route::DiscoveryUnsupported => "discovery_unsupported",
        Route::Discover { .. } => "discover",
        Route::Expired => "expired",
        Route::Unroutable => "unroutable",
        Route::ChannelUnsupported => "channel_unsupported",
        Route::Reply { .. } => "reply",
        Route::LongLivedRefused => "long_lived_refused",
        Route::Admit { .. } => "admit",
    }
}

/// One row of the route table.
type Row = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    bool,
    u64,
    &'static str,
);

#[test]
fn every_route_is_taken_by_the_commands_that_belong_there() {
    // (command type, channel, payload, response_timeout, strict, elapsed since receipt, route)
    let table: [Row; 28] = [
        ("jsonrpc", "main", Some(CALL), None, false, 0, "admit"),
        ("jsonrpc", "main", Some(CALL), None, true, 0, "admit"),
        ("jsonrpc", "main", Some(NOTE), None, true, 0, "admit"),
        ("session_termination", "main", None, None, true, 0, "admit"),
        ("jsonrpc", "other", Some(CALL), None, false, 0, "unroutable"),
        ("session_termination", "other", None, None, false, 0, "unroutable"),
        ("jsonrpc", "main", Some(REPLY), None, true, 0, "reply"),
        ("jsonrpc", "other", Some(REPLY), None, true, 0, "unroutable"),
        ("jsonrpc", "main", Some(LISTEN), None, true, 0, "long_lived_refused"),
        ("jsonrpc", "main", Some(LISTEN), None, false, 0, "admit"),
        ("jsonrpc", "main", Some(CALL), Some("5s"), false, 4, "admit"),
        ("jsonrpc", "main", Some(CALL), Some("5s"), false, 5, "expired"),
        // Expiry is checked before the channel: an expired command is never answered.
        ("jsonrpc", "other", Some(CALL), Some("5s"), true, 6, "expired"),
        ("future_thing", "main", None, Some("5s"), true, 6, "unknown_type"),
        ("future_thing", "main", Some(NOTE), None, true, 0, "unknown_type"),
        ("future_thing", "main", Some(REPLY), None, false, 0, "unknown_type"),
        // An unknown type carrying a request is answered, whatever its channel, unless expired.
        ("future_thing", "main", Some(CALL), None, true, 0, "unknown_request"),
        ("future_thing", "other", Some(CALL), None, false, 0, "unknown_request"),
        ("future_thing", "main", Some(CALL), Some("5s"), true, 6, "expired"),
        ("oauth_discovery", "main", None, None, true, 0, "discover"),
        ("oauth_discovery", "main", Some(CALL), None, false, 0, "discover"),
        ("oauth_discovery", "local", None, None, true, 0, "discovery_unsupported"),
        ("oauth_discovery", "other", None, None, true, 0, "unroutable"),
        ("oauth_discovery", "main", None, Some("5s"), true, 5, "expired"),
        // `harpoon` without a target: unsupported, but discovery there is always refused.
        ("jsonrpc", "harpoon", Some(CALL), None, false, 0, "channel_unsupported"),
        ("jsonrpc", "harpoon", Some(NOTE), None, true, 0, "channel_unsupported"),
        (
            "session_termination",
            "harpoon",
            None,
            None,
            false,
            0,
            "channel_unsupported",
        ),
        (
            "oauth_discovery",
            "harpoon",
            None,
            None,
            false,
            0,
            "discovery_unsupported",
        ),
    ];
    let received_at = Instant::now();
    for (command_type, channel, payload, timeout, strict, elapsed, expected) in table {
        let cmd = command(command_type, channel, payload, timeout);
        let now = received_at + Duration::from_secs(elapsed);
        let route = route(&cmd, received_at, main_only, strict, now);
        assert_eq!(
            label(&route),
            expected,
            "{command_type} on {channel} {payload:?} timeout {timeout:?} strict {strict} after {elapsed}s"
        );
    }
}

#[test]
fn an_admitted_route_carries_the_channel_the_method_and_the_deadline_from_receipt() {
    let cmd = command("jsonrpc", "main", Some(CALL), Some("5s"));
    let received_at = Instant::now();
    let Route::Admit {
        channel,
        method,
        deadline,
    } = route(&cmd, received_at, main_only, true, received_at)
    else {
        panic!("a tools/call on main is admitted");
    };
    assert_eq!(channel, "main-transport");
    assert_eq!(method, Some("tools/call"));
    assert_eq!(deadline, Some(received_at + Duration::from_secs(5)));
}
