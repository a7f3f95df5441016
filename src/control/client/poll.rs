//! The long poll: one `GET` asking for at most `limit` commands (long or quick), up to
//! its response headers, then its body read and decoded.
//!
//! Invariants:
//! - a poll waits at most its own wait plus [`POLL_SLACK`], and its body is read by the
//!   same deadline, bounded to [`MAX_POLL_BODY`] bytes (a larger one is undecodable);
//! - once the response headers arrive ([`PollAnswer`]), the commands the body holds are
//!   the gateway's: the answer is read, never dropped unread;
//! - a failure is classified once into a [`PollErrorKind`]; the gateway's own exhaustion
//!   of descriptors is named before anything that would blame the control plane.

use std::time::Duration;

use http::Method;
use tokio::time::Instant;

use super::routing::PollEnd;
use super::{read_bounded, retry_after, warn_tls, BodyError, ControlClient};
use crate::descriptors::{any_is_exhaustion, EXHAUSTION_WORDS};
use crate::egress::client::{Answer, SendError, SendErrorKind};
use crate::protocol::{decode_poll, Command, InvalidCommand};
use crate::telemetry::{label_enum, PollErrorLabel};

/// Poll bodies above this are refused as undecodable rather than buffered.
const MAX_POLL_BODY: usize = 32 * 1024 * 1024;
/// Slack on top of the server-side long-poll wait before the client gives up.
const POLL_SLACK: Duration = Duration::from_secs(10);

/// How long a poll asks the control plane to hold it when nothing is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PollWait {
    /// `control_plane.poll_timeout`: the ordinary long poll.
    Long,
    /// Answer at once: the first poll of a run, and the first after a failure, so that
    /// readiness reflects the control plane within a round trip, not a poll timeout.
    Quick,
}

/// The wait of a [`PollWait::Quick`] poll (the contract's minimum is 1 ms).
pub(super) const QUICK_POLL: Duration = Duration::from_millis(1);

/// A poll whose response headers arrived: from here on its commands belong to the
/// gateway, and each must be answered or accounted for.
pub(crate) struct PollAnswer {
    /// Monotonic time the response headers arrived.
    pub received_at: Instant,
    deadline: Instant,
    /// `None` for `204`.
    body: Option<Answer>,
}

/// A successful poll.
#[derive(Debug)]
pub(crate) struct Polled {
    /// Monotonic time the response headers arrived: every deadline is anchored here.
    pub received_at: Instant,
    /// Empty for `204`.
    pub commands: Vec<Result<Command, InvalidCommand>>,
}

label_enum! {
    /// `poll_errors_total{kind}`.
    pub(crate) enum PollErrorKind {
        Timeout => "timeout",
        Transport => "transport",
        Unauthorized => "unauthorized",
        RateLimited => "rate_limited",
        ServerError => "server_error",
        ClientError => "client_error",
        Decode => "decode",
        /// Not sent: the gateway had no descriptor or socket memory for the connection.
        LocalExhaustion => "local_exhaustion",
        /// `409 wrong_cluster`: a routing correction (`control_plane.routing_correction`).
        WrongCluster => "wrong_cluster",
    }
}

impl PollErrorLabel for PollErrorKind {}

impl PollErrorKind {
    fn from_status(status: u16) -> Self {
        match status {
            401 | 403 => Self::Unauthorized,
            429 => Self::RateLimited,
            500..=599 => Self::ServerError,
            _ => Self::ClientError,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "poll failed ({}){}{}",
    kind.as_str(),
    status.map(|s| format!(": HTTP {s}")).unwrap_or_default(),
    if *kind == PollErrorKind::LocalExhaustion { format!(": {EXHAUSTION_WORDS}") } else { String::new() }
)]
pub(crate) struct PollError {
    pub kind: PollErrorKind,
    pub status: Option<u16>,
    /// Server-imposed minimum wait, already capped.
    pub retry_after: Option<Duration>,
}

impl PollError {
    pub(crate) fn new(kind: PollErrorKind, status: Option<u16>, retry_after: Option<Duration>) -> Self {
        Self {
            kind,
            status,
            retry_after,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        self.kind.as_str()
    }
}

impl ControlClient {
    /// One long poll asking for at most `limit` commands, up to its response headers.
    ///
    /// # Cancel safety
    /// Cancel-safe only in the sense the contract allows: dropped before the response
    /// headers arrive, no command has been handed to the gateway. Once it returns
    /// [`PollAnswer`], the control plane has handed out whatever the body holds: read it
    /// with [`read_commands`](Self::read_commands), never drop it unread.
    pub(crate) async fn poll(&self, limit: usize, wait: PollWait) -> Result<PollAnswer, PollError> {
        // The very first attempt waits `initial_poll_timeout` when it is set (once).
        let first = self.initial.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (wait, first) = match first {
            Some(urls) => (PollWait::Long, Some(urls)),
            None => (wait, None),
        };
        let long = wait == PollWait::Long;
        let learned = long.then(|| self.learned.urls()).flatten();
        let urls = first.as_deref().or(learned.as_deref()).unwrap_or(&self.poll_urls);
        let (target, wait) = urls.target(limit, wait);
        let sent_at = Instant::now();
        let deadline = sent_at + wait + POLL_SLACK;
        let mut headers = self.request_headers();
        let routed = self.routing.as_deref().map(|routing| (routing, routing.snapshot()));
        if let Some((_, (_, Some(token)))) = &routed {
            if let Ok(value) = http::HeaderValue::from_str(token) {
                headers.insert(http::HeaderName::from_static("x-tunnel-shard-token"), value);
            }
        }
        let ended = |end| {
            if let Some((routing, (generation, _))) = &routed {
                routing.ended(*generation, end);
            }
        };
        let request = self.client.send(Method::GET, target, headers, bytes::Bytes::new());
        let response = match tokio::time::timeout_at(deadline, request).await {
            Err(_) => {
                ended(PollEnd::Failure);
                return Err(PollError::new(PollErrorKind::Timeout, None, None));
            }
            Ok(Err(e)) => {
                ended(PollEnd::Failure);
                if long && e.kind() == SendErrorKind::Lost {
                    self.learn_wait(sent_at.elapsed(), wait);
                }
                return Err(PollError::new(poll_send_error_kind(&e), None, None));
            }
            Ok(Ok(r)) => r,
        };
        let received_at = Instant::now();
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        if let (Some((routing, (generation, _))), 409) = (&routed, status) {
            if let Some(correction) = Self::read_correction(response, deadline).await {
                routing.corrected(*generation, correction);
                tracing::info!("the control plane corrected this replica's poll routing (409 wrong_cluster): later polls carry its placement token");
                return Err(PollError::new(PollErrorKind::WrongCluster, Some(409), retry_after));
            }
            ended(PollEnd::Neutral);
            return Err(PollError::new(PollErrorKind::ClientError, Some(409), retry_after));
        }
        ended(match status {
            200 | 204 => PollEnd::Success,
            408 | 500..=599 => PollEnd::Failure,
            _ => PollEnd::Neutral,
        });
        match status {
            204 => Ok(PollAnswer {
                received_at,
                deadline,
                body: None,
            }),
            200 => Ok(PollAnswer {
                received_at,
                deadline,
                body: Some(response),
            }),
            _ => Err(PollError::new(
                PollErrorKind::from_status(status),
                Some(status),
                retry_after,
            )),
        }
    }

    /// A poll's `409` read as a routing correction (at most 64 KiB of its body, by the poll's
    /// deadline), if it is a valid one.
    async fn read_correction(response: Answer, deadline: Instant) -> Option<super::routing::Correction> {
        let tokens: Vec<Vec<u8>> = response
            .headers()
            .get_all("x-tunnel-shard-token")
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        let body = tokio::time::timeout_at(deadline, read_bounded(response, 64 * 1024))
            .await
            .ok()?
            .ok()?;
        let tokens: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
        super::routing::correction(&tokens, &body)
    }

    /// A long poll of `attempted` whose connection a proxy closed after `elapsed`, before
    /// any response header: future long polls ask for the wait it lets through
    /// ([`super::learned`]). Only on a proxied route.
    fn learn_wait(&self, elapsed: Duration, attempted: Duration) {
        if self.client.route() == crate::egress::proxy::Route::Direct {
            return;
        }
        let learned = self
            .learned
            .learn((elapsed, attempted, POLL_SLACK), &self.poll_url, &self.poll_filter);
        let Some(wait) = learned else {
            return;
        };
        tracing::warn!(
            learned_wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "control-plane proxy closed long poll; lowering future poll timeout"
        );
    }

    /// Reads and decodes an answered poll's body (bounded in size and by the poll's own
    /// deadline).
    ///
    /// # Cancel safety
    /// Not cancel-safe: dropping it loses commands the control plane handed out. Bound it
    /// instead (the stop order gives it `strict.cleanup_timeout`).
    pub(crate) async fn read_commands(&self, answer: PollAnswer) -> Result<Polled, PollError> {
        let PollAnswer {
            received_at,
            deadline,
            body,
        } = answer;
        let Some(response) = body else {
            return Ok(Polled {
                received_at,
                commands: Vec::new(),
            });
        };
        let status = Some(response.status().as_u16());
        let body = match tokio::time::timeout_at(deadline, read_bounded(response, MAX_POLL_BODY)).await {
            Err(_) => return Err(PollError::new(PollErrorKind::Timeout, status, None)),
            Ok(Err(BodyError::TooLarge)) => return Err(PollError::new(PollErrorKind::Decode, status, None)),
            Ok(Err(BodyError::Transport)) => return Err(PollError::new(PollErrorKind::Transport, status, None)),
            Ok(Ok(b)) => b,
        };
        let commands = decode_poll(&body).map_err(|_| PollError::new(PollErrorKind::Decode, status, None))?;
        Ok(Polled { received_at, commands })
    }
}

/// How a poll that got no response headers failed. Exhaustion of the gateway's own
/// descriptors is named before anything that would blame the control plane.
fn poll_send_error_kind(e: &SendError) -> PollErrorKind {
    warn_tls(e, "poll");
    let kind = e.kind();
    if kind.wrote_nothing() && any_is_exhaustion(e.io_errors()) {
        return PollErrorKind::LocalExhaustion;
    }
    match kind {
        SendErrorKind::ConnectTimeout | SendErrorKind::Timeout => PollErrorKind::Timeout,
        SendErrorKind::Dns
        | SendErrorKind::Refused
        | SendErrorKind::Tls
        | SendErrorKind::ProxyRefused
        | SendErrorKind::ProxyAuth
        | SendErrorKind::Connect
        | SendErrorKind::Lost => PollErrorKind::Transport,
    }
}
