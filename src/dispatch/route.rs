//! Where a command goes, as one pure function of the command, the channels, the mode
//! and the clock: skipped, answered without reaching any MCP server, handed to the leg
//! that asked (a reply), or into the admission line (a leg, or an OAuth discovery).
//!
//! Every command type is answered exactly once or skipped with a counted reason: the
//! contract's two types and `oauth_discovery` are routed; an unknown type carrying a
//! JSON-RPC request is answered with an error (its caller waits for one); any other
//! unknown type is skipped.
//!
//! Asked twice per command, with the same rules: by the poller as it hands the command
//! on (to take its place in the admission line in receipt order), and by the command's
//! task when it starts (the deadline may have passed in between).

use tokio::time::Instant;

use crate::downstream::Transport;
use crate::protocol::{Command, CommandKind, JsonRpcPayload};

/// What routing needs to know of a channel's transport.
pub(super) trait Routable {
    /// Whether `oauth_discovery` can run on it (an HTTP channel).
    fn serves_discovery(&self) -> bool;
    /// Whether it serves commands now (channel `harpoon` only while it has a target).
    fn is_routable(&self) -> bool;
}

impl Routable for &Transport {
    fn serves_discovery(&self) -> bool {
        Transport::serves_discovery(self)
    }

    fn is_routable(&self) -> bool {
        Transport::is_routable(self)
    }
}

/// Where one command goes. `T` is what a channel name resolves to (a transport).
#[derive(Debug)]
pub(super) enum Route<'a, T> {
    /// A `command_type` this gateway does not know, carrying no JSON-RPC request: counted
    /// and skipped.
    UnknownType(&'a str),
    /// A `command_type` this gateway does not know, carrying a JSON-RPC request: answered
    /// with an error, so that its caller is told.
    UnknownRequest(&'a str),
    /// `oauth_discovery` on a configured channel that is not HTTP (stdio): answered
    /// `unsupported_channel`.
    DiscoveryUnsupported,
    /// `oauth_discovery` on an HTTP channel: joins the admission line (its requests are
    /// downstream interactions).
    Discover { channel: T, deadline: Option<Instant> },
    /// Its `response_timeout` has passed: dropped without contacting an MCP server.
    Expired,
    /// No channel of that name: answered "not executed", never routed elsewhere.
    Unroutable,
    /// A channel that serves nothing now (`harpoon` without a target): answered
    /// "unsupported channel" with `400`, as upstream answers it.
    ChannelUnsupported,
    /// A caller's reply to a server request: runs on the leg that asked, unadmitted.
    Reply {
        payload: &'a JsonRpcPayload,
        channel: T,
        deadline: Option<Instant>,
    },
    /// Strict mode refuses a long-lived subscription stream.
    LongLivedRefused,
    /// Joins the admission line.
    Admit {
        channel: T,
        method: Option<&'a str>,
        deadline: Option<Instant>,
    },
}

/// The command's deadline: its `response_timeout` from the poll's receipt.
pub(super) fn deadline(cmd: &Command, received_at: Instant) -> Option<Instant> {
    cmd.response_timeout.budget().map(|b| received_at + b)
}

/// Routes `cmd`, received at `received_at`, at time `now`. `channel` resolves a
/// configured channel name.
pub(super) fn route<'a, T: Routable>(
    cmd: &'a Command,
    received_at: Instant,
    channel: impl FnOnce(&str) -> Option<T>,
    strict: bool,
    now: Instant,
) -> Route<'a, T> {
    let payload = match &cmd.kind {
        CommandKind::JsonRpc(p) => Some(p),
        CommandKind::SessionTermination | CommandKind::OAuthDiscovery => None,
        CommandKind::Unknown(u) if u.request().is_none() => return Route::UnknownType(&u.command_type),
        CommandKind::Unknown(_) => None,
    };
    let deadline = deadline(cmd, received_at);
    if deadline.is_some_and(|d| now >= d) {
        return Route::Expired;
    }
    match &cmd.kind {
        CommandKind::Unknown(u) => return Route::UnknownRequest(&u.command_type),
        CommandKind::JsonRpc(_) | CommandKind::SessionTermination | CommandKind::OAuthDiscovery => {}
    }
    let Some(channel) = channel(cmd.channel.as_str()) else {
        return Route::Unroutable;
    };
    if matches!(cmd.kind, CommandKind::OAuthDiscovery) {
        return if channel.serves_discovery() {
            Route::Discover { channel, deadline }
        } else {
            Route::DiscoveryUnsupported
        };
    }
    if !channel.is_routable() {
        return Route::ChannelUnsupported;
    }
    match payload {
        Some(p) if p.is_reply() => Route::Reply {
            payload: p,
            channel,
            deadline,
        },
        Some(p) if strict && p.method().is_some_and(is_long_lived) => Route::LongLivedRefused,
        Some(p) => Route::Admit {
            channel,
            method: p.method(),
            deadline,
        },
        None => Route::Admit {
            channel,
            method: None,
            deadline,
        },
    }
}

/// Requests whose response stream the server keeps open by design (2026-07-28).
fn is_long_lived(method: &str) -> bool {
    method == "subscriptions/listen"
}

#[cfg(test)]
mod tests;
