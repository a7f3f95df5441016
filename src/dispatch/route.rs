//! Where a command goes, as one pure function of the command, the channels, the mode
//! and the clock: skipped, answered without reaching any MCP server, handed to the leg
//! that asked (a reply), or into the admission line (a leg, or an OAuth discovery).
//!
//! Every command type is answered exactly once or skipped with a counted reason: the
//! contract's two types and `oauth_discovery` are routed; an unknown type carrying a
//! JSON-RPC request is answered with an error (its caller waits for one); any other
//! unknown type is skipped.
//!
//! Asked once per command, at its receipt, with the receipt's clock: by the poller's hand
//! as it hands the command on, so that a route into the admission line takes its place
//! there in receipt order. The route crosses into the command's task as a [`Routed`],
//! which borrows nothing; the task then asks only whether the deadline passed while the
//! command was queued ([`Routed::unless_expired`]), as `route` itself checks it.

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

/// A [`Route`] as it crosses from the receipt into the command's task: it borrows neither
/// the command nor the channels. What a route borrowed of the command is owned here (an
/// unknown type's name, a reply's payload); the transport a route resolved is not kept,
/// and is looked up again by the channel's name (the channels never change). A route into
/// the admission line holds its place there, `P`; every deadline is the route's own.
#[derive(Debug)]
pub(super) enum Routed<P> {
    UnknownType(String),
    UnknownRequest(String),
    DiscoveryUnsupported,
    Discover {
        deadline: Option<Instant>,
        place: P,
    },
    Expired,
    Unroutable,
    ChannelUnsupported,
    Reply {
        payload: JsonRpcPayload,
        deadline: Option<Instant>,
    },
    LongLivedRefused,
    Admit {
        deadline: Option<Instant>,
        place: P,
    },
}

impl<T> Route<'_, T> {
    /// This route as a [`Routed`]; `join` takes the place of a route into the admission
    /// line, given its method and deadline (a discovery has no method).
    pub(super) fn owned<P>(self, join: impl FnOnce(Option<&str>, Option<Instant>) -> P) -> Routed<P> {
        // A resolved channel (`_channel`) stays behind: it borrows the channels.
        match self {
            Route::UnknownType(t) => Routed::UnknownType(t.to_owned()),
            Route::UnknownRequest(t) => Routed::UnknownRequest(t.to_owned()),
            Route::DiscoveryUnsupported => Routed::DiscoveryUnsupported,
            Route::Discover {
                channel: _channel,
                deadline,
            } => Routed::Discover {
                deadline,
                place: join(None, deadline),
            },
            Route::Expired => Routed::Expired,
            Route::Unroutable => Routed::Unroutable,
            Route::ChannelUnsupported => Routed::ChannelUnsupported,
            Route::Reply {
                payload,
                channel: _channel,
                deadline,
            } => Routed::Reply {
                payload: payload.clone(),
                deadline,
            },
            Route::LongLivedRefused => Routed::LongLivedRefused,
            Route::Admit {
                channel: _channel,
                method,
                deadline,
            } => Routed::Admit {
                deadline,
                place: join(method, deadline),
            },
        }
    }
}

impl<P> Routed<P> {
    /// This route, or [`Routed::Expired`] when `cmd`'s deadline (from `received_at`) has
    /// passed by `now`, checked as [`route`] checks it: before anything but an unknown
    /// type carrying no request. The one part of a route that time changes; a place in
    /// the admission line is let go with the route it belonged to.
    pub(super) fn unless_expired(self, cmd: &Command, received_at: Instant, now: Instant) -> Self {
        match self {
            Routed::UnknownType(_) | Routed::Expired => self,
            _ if deadline(cmd, received_at).is_some_and(|d| now >= d) => Routed::Expired,
            _ => self,
        }
    }
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
