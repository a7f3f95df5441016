//! One `call_target`: the outbound request to a target's exact URL, its redirects, and
//! what came back, under upstream's rules and in better words.
//!
//! Invariants:
//! - only a registered target's exact URL is ever dialled: a redirect is followed only to
//!   a URL that is itself a target (and only within the call's limits), and a blocked
//!   one is never dialled;
//! - the caller's headers pass a filter first: hop-by-hop, forwarding, identity and
//!   proxy headers, `Cookie`, and every header a `Connection` header names, are dropped;
//!   the command's own headers (the connector's bearer token) never reach this module,
//!   nor does any credential of the gateway;
//! - a request body over the call's byte limit is refused before anything is sent; a
//!   response body over it is an error, never a partial body;
//! - the whole call (connect, TLS, every hop, the body) ends by its `timeout_ms`;
//! - every failure says whether anything may have reached the target ([`Sent`]).
//!
//! # Cancel safety
//! Dropping a call after its first poll may leave a request on the wire: the caller
//! counts it `abandoned`.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, COOKIE, USER_AGENT};
use http::{Method, StatusCode};
use tokio::time::Instant;
use url::Url;

use super::registry::{Registry, Target};
use super::OutboundClient as Client;
use crate::downstream::watch::Release;
use crate::egress::client::{Answer, SendErrorKind};
use crate::telemetry::metrics::{HarpoonCallOutcome, HarpoonRefusalReason};

/// Request headers never forwarded (upstream's list), compared without regard to case.
const DROPPED: &[&str] = &[
    "accept-encoding",
    "cf-connecting-ip",
    "connection",
    "content-length",
    "cookie",
    "forwarded",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "true-client-ip",
    "upgrade",
    "user-agent",
    "via",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-custom-cf-witness-actor",
    "x-custom-cf-witness-authorization",
    "x-envoy-external-address",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
    "x-openai-actor-authorization",
    "x-openai-authorization",
    "x-openai-authorization-error",
    "x-openai-internal-caller",
    "x-openai-skip-auth",
    "x-original-forwarded-for",
    "x-real-ip",
    "x-tunnel-traffic-source",
];

/// `timeout_ms` bounds and default, of `call_target` and `call_target_template`.
pub(crate) const TIMEOUT_MS: (i64, i64, i64) = (100, 120_000, 30_000);

/// One validated call.
#[derive(Debug)]
pub(crate) struct CallArgs {
    pub(crate) method: Method,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Bytes,
    pub(crate) timeout: Duration,
    pub(crate) max_bytes: usize,
    pub(crate) follow_redirects: bool,
    pub(crate) max_redirects: usize,
}

/// What the target answered (the last hop's response).
#[derive(Debug)]
pub(crate) struct Answered {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    /// The target that served it (after redirects).
    pub(crate) served_by: String,
}

/// Whether anything of a failed call may have reached a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Nothing left the gateway.
    No,
    /// A target answered (a hop was answered before the failure).
    Answered,
    /// A request may have been written and no whole answer came back.
    Maybe,
}

/// Why a call produced no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallFailure {
    RequestTooLarge,
    Dns,
    Refused,
    Tls,
    ConnectTimeout,
    ConnectFailed,
    ProxyRefused,
    /// The call's `timeout_ms` passed; `sent` says whether a request may have left.
    Timeout {
        sent: Sent,
        millis: u64,
    },
    /// The connection failed after the request may have been written.
    Lost,
    RedirectLimit,
    /// The redirect's destination is not a target; `scheme` when only the scheme differs.
    RedirectBlocked {
        scheme: Option<(String, String)>,
    },
    ResponseReadFailed,
    ResponseTooLarge,
}

impl CallFailure {
    /// The tool error's message (after `label <L>: `): upstream's words first, so a
    /// caller matching them still does, then what happened.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::RequestTooLarge => "request body exceeds size limit".into(),
            Self::Dns => "request failed: the target's host name did not resolve (DNS); nothing was sent".into(),
            Self::Refused => "request failed: the target refused the connection; nothing was sent".into(),
            Self::Tls => {
                "request failed: the TLS handshake with the target failed (certificate or protocol); nothing was sent"
                    .into()
            }
            Self::ConnectTimeout => "request failed: connecting to the target timed out; nothing was sent".into(),
            Self::ConnectFailed => "request failed: the target could not be reached; nothing was sent".into(),
            Self::ProxyRefused => {
                "request failed: the egress proxy (harpoon.proxy) refused the tunnel; nothing was sent".into()
            }
            Self::Timeout { sent: Sent::No, millis } => {
                format!("request failed: timed out after {millis} ms while connecting to the target; nothing was sent")
            }
            Self::Timeout { millis, .. } => format!(
                "request failed: timed out after {millis} ms; the request may have reached the target and taken effect"
            ),
            Self::Lost => {
                "request failed: the connection was lost; the request may have reached the target and taken effect"
                    .into()
            }
            Self::RedirectLimit => "redirect limit exceeded".into(),
            Self::RedirectBlocked {
                scheme: Some((from, to)),
            } => {
                format!("redirect blocked: scheme mismatch (allowlisted {from}, redirected to {to})")
            }
            Self::RedirectBlocked { scheme: None } => "redirect blocked".into(),
            Self::ResponseReadFailed => "response read failed".into(),
            Self::ResponseTooLarge => "response exceeds size limit".into(),
        }
    }

    /// Whether anything may have reached a target.
    pub(crate) fn sent(&self) -> Sent {
        match self {
            Self::RequestTooLarge
            | Self::Dns
            | Self::Refused
            | Self::Tls
            | Self::ConnectTimeout
            | Self::ConnectFailed
            | Self::ProxyRefused => Sent::No,
            Self::Timeout { sent, .. } => *sent,
            Self::Lost | Self::ResponseReadFailed => Sent::Maybe,
            Self::RedirectLimit | Self::RedirectBlocked { .. } | Self::ResponseTooLarge => Sent::Answered,
        }
    }

    /// Upstream's `outcome` label of the call metric.
    pub(crate) fn metric_outcome(&self) -> HarpoonCallOutcome {
        match self {
            Self::RequestTooLarge => HarpoonCallOutcome::InvalidInput,
            Self::ResponseReadFailed => HarpoonCallOutcome::ResponseReadError,
            Self::ResponseTooLarge => HarpoonCallOutcome::ResponseTooLarge,
            Self::Dns
            | Self::Refused
            | Self::Tls
            | Self::ConnectTimeout
            | Self::ConnectFailed
            | Self::ProxyRefused
            | Self::Timeout { .. }
            | Self::Lost
            | Self::RedirectLimit
            | Self::RedirectBlocked { .. } => HarpoonCallOutcome::RequestError,
        }
    }

    /// The refusal `call_target` counts for a failure after the target answered (a
    /// blocked redirect, too many redirects, a body over the limit); `None` for the others.
    pub(crate) fn refusal(&self) -> Option<HarpoonRefusalReason> {
        match self {
            Self::RedirectBlocked { .. } => Some(HarpoonRefusalReason::RedirectBlocked),
            Self::RedirectLimit => Some(HarpoonRefusalReason::RedirectLimit),
            Self::ResponseTooLarge => Some(HarpoonRefusalReason::ResponseTooLarge),
            Self::RequestTooLarge
            | Self::Dns
            | Self::Refused
            | Self::Tls
            | Self::ConnectTimeout
            | Self::ConnectFailed
            | Self::ProxyRefused
            | Self::Timeout { .. }
            | Self::Lost
            | Self::ResponseReadFailed => None,
        }
    }

    /// A stable kind for logs and the refusal metric.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::RequestTooLarge => "request_too_large",
            Self::Dns => "dns",
            Self::Refused => "connection_refused",
            Self::Tls => "tls",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectFailed => "dial",
            Self::ProxyRefused => "proxy_refused",
            Self::Timeout { .. } => "timeout",
            Self::Lost => "connection_reset",
            Self::RedirectLimit => "redirect_limit",
            Self::RedirectBlocked { .. } => "redirect_blocked",
            Self::ResponseReadFailed => "response_read_failed",
            Self::ResponseTooLarge => "response_too_large",
        }
    }
}

/// The caller's headers, filtered; and how many were dropped.
pub(crate) fn forwardable(headers: &[(String, String)]) -> (HeaderMap, usize) {
    let nominated: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| value.split(',').map(|v| v.trim().to_ascii_lowercase()))
        .filter(|v| !v.is_empty())
        .collect();
    let mut out = HeaderMap::new();
    let mut dropped = 0;
    for (name, value) in headers {
        let lower = name.trim().to_ascii_lowercase();
        if lower.is_empty() {
            continue;
        }
        if DROPPED.contains(&lower.as_str()) || nominated.contains(&lower) {
            dropped += 1;
            continue;
        }
        match (HeaderName::from_bytes(lower.as_bytes()), HeaderValue::from_str(value)) {
            // One value per name; of names that differ only in case, the last wins.
            (Ok(name), Ok(value)) => {
                out.insert(name, value);
            }
            _ => dropped += 1,
        }
    }
    (out, dropped)
}

/// Runs one call on `client` from `target`, following redirects within `args`' limits
/// to targets only; `registry` is read for each hop. `release` lets the first request
/// out, with no `.await` since it was taken.
pub(crate) async fn call(
    client: &Client,
    registry: &std::sync::Mutex<Registry>,
    target: &Target,
    args: CallArgs,
    user_agent: &str,
    allow_plaintext: bool,
    release: Release<'_>,
) -> Result<Answered, CallFailure> {
    if args.body.len() > args.max_bytes {
        return Err(CallFailure::RequestTooLarge);
    }
    let deadline = Instant::now() + args.timeout;
    let millis = u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX);
    let (mut headers, _) = forwardable(&args.headers);
    headers.insert(
        USER_AGENT,
        HeaderValue::from_str(user_agent).unwrap_or(HeaderValue::from_static("tunnelgate")),
    );
    let mut hop = Hop {
        url: target.url.clone(),
        host: host_of(&target.url),
        method: args.method.clone(),
        body: args.body.clone(),
        headers,
    };
    for redirects in 0.. {
        let send = tokio::time::timeout_at(deadline, send(client, &hop));
        let sent = match redirects {
            0 => release.send(send).await,
            _ => send.await,
        };
        let resp = match sent {
            Err(_) => {
                return Err(CallFailure::Timeout {
                    sent: if release.may_have_left() { Sent::Maybe } else { Sent::No },
                    millis,
                });
            }
            Ok(Err(failure)) => return Err(failure),
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        let location = resp.headers().get(http::header::LOCATION).cloned();
        if !status.is_redirection() || !args.follow_redirects || location.is_none() {
            let headers = resp.headers().clone();
            let body = read_body(resp, args.max_bytes, deadline, millis).await?;
            return Ok(Answered {
                status,
                headers,
                body,
                served_by: hop.url,
            });
        }
        if redirects >= args.max_redirects {
            return Err(CallFailure::RedirectLimit);
        }
        let next = next_url(&hop.url, location.as_ref())?;
        let allowed = {
            let registry = super::lock(registry);
            let found = registry.with_url(next.as_str()).next().map(|t| t.url.clone());
            found
        };
        let Some(next_target) = allowed.filter(|u| allow_plaintext || u.starts_with("https://")) else {
            return Err(CallFailure::RedirectBlocked {
                scheme: scheme_mismatch(registry, &next),
            });
        };
        hop = hop.redirected(status, next_target);
    }
    unreachable!("the loop returns")
}

/// One hop of a call.
struct Hop {
    url: String,
    host: String,
    method: Method,
    body: Bytes,
    headers: HeaderMap,
}

impl Hop {
    /// The next hop, as an HTTP client follows `status`: 301, 302 and 303 become a
    /// body-less `GET`, 307 and 308 resend the method and the body; `Authorization` and
    /// `Cookie` do not follow to another host. No `Referer` is added.
    fn redirected(mut self, status: StatusCode, url: String) -> Hop {
        if matches!(status.as_u16(), 301..=303) {
            self.method = Method::GET;
            self.body = Bytes::new();
            self.headers.remove(http::header::CONTENT_TYPE);
        }
        let host = host_of(&url);
        if host != self.host && !host.ends_with(&format!(".{}", self.host)) {
            self.headers.remove(AUTHORIZATION);
            self.headers.remove(COOKIE);
        }
        Hop { url, host, ..self }
    }
}

fn host_of(url: &str) -> String {
    Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}

fn next_url(current: &str, location: Option<&HeaderValue>) -> Result<Url, CallFailure> {
    let blocked = CallFailure::RedirectBlocked { scheme: None };
    let base = Url::parse(current).map_err(|_| blocked.clone())?;
    let location = location.and_then(|l| l.to_str().ok()).ok_or(blocked.clone())?;
    base.join(location).map_err(|_| blocked)
}

/// `Some((allowlisted, redirected))` schemes when `next` differs from a target only by
/// its scheme.
fn scheme_mismatch(registry: &std::sync::Mutex<Registry>, next: &Url) -> Option<(String, String)> {
    let mut other = next.clone();
    let flipped = if next.scheme() == "https" { "http" } else { "https" };
    other.set_scheme(flipped).ok()?;
    let registry = super::lock(registry);
    let found = registry.with_url(other.as_str()).next().is_some();
    found.then(|| (flipped.to_owned(), next.scheme().to_owned()))
}

async fn send(client: &Client, hop: &Hop) -> Result<Answer, CallFailure> {
    // Go never sends the fragment; hyper's `Uri` has none.
    let url = hop.url.split('#').next().unwrap_or_default();
    let uri: http::Uri = url.parse().map_err(|_| CallFailure::ConnectFailed)?;
    client
        .send(hop.method.clone(), &uri, hop.headers.clone(), hop.body.clone())
        .await
        .map_err(|e| send_failure(e.kind()))
}

/// What the one client's error kind means for a call.
fn send_failure(kind: SendErrorKind) -> CallFailure {
    match kind {
        SendErrorKind::Dns => CallFailure::Dns,
        SendErrorKind::Refused => CallFailure::Refused,
        SendErrorKind::ConnectTimeout => CallFailure::ConnectTimeout,
        SendErrorKind::Tls => CallFailure::Tls,
        SendErrorKind::ProxyRefused | SendErrorKind::ProxyAuth => CallFailure::ProxyRefused,
        SendErrorKind::Connect => CallFailure::ConnectFailed,
        SendErrorKind::Timeout | SendErrorKind::Lost => CallFailure::Lost,
    }
}

/// `doctor`'s look at a target: a `HEAD` (a `GET` when the target refuses `HEAD` with
/// `405` or `501`), which changes nothing; the status, or why nothing answered.
pub(crate) async fn probe(client: &Client, url: &str, timeout: Duration) -> Result<StatusCode, CallFailure> {
    let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let deadline = Instant::now() + timeout;
    let mut method = Method::HEAD;
    loop {
        let hop = Hop {
            url: url.to_owned(),
            host: String::new(),
            method: method.clone(),
            body: Bytes::new(),
            headers: HeaderMap::new(),
        };
        let status = match tokio::time::timeout_at(deadline, send(client, &hop)).await {
            Err(_) => {
                return Err(CallFailure::Timeout {
                    sent: Sent::Maybe,
                    millis,
                })
            }
            Ok(Err(failure)) => return Err(failure),
            Ok(Ok(resp)) => resp.status(),
        };
        if method == Method::HEAD && matches!(status.as_u16(), 405 | 501) {
            method = Method::GET;
            continue;
        }
        return Ok(status);
    }
}

async fn read_body(mut resp: Answer, max: usize, deadline: Instant, millis: u64) -> Result<Vec<u8>, CallFailure> {
    let mut body = Vec::new();
    loop {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Err(_) => {
                return Err(CallFailure::Timeout {
                    sent: Sent::Answered,
                    millis,
                })
            }
            Ok(Err(_)) => return Err(CallFailure::ResponseReadFailed),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(chunk))) => chunk,
        };
        if body.len() + chunk.len() > max {
            return Err(CallFailure::ResponseTooLarge);
        }
        body.extend_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn hop_by_hop_identity_and_connection_named_headers_are_dropped() {
        let (kept, dropped) = forwardable(&pairs(&[
            ("Authorization", "Basic abc"),
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-Forwarded-For", "1.2.3.4"),
            ("Cookie", "a=b"),
            ("User-Agent", "x"),
            ("connection", "X-Secret, authorization"),
            ("X-Secret", "s"),
            ("X-API-Key", "k"),
        ]));
        assert_eq!(dropped, 6);
        let names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type", "x-api-key"]);
    }

    #[test]
    fn every_failure_says_whether_anything_may_have_reached_the_target() {
        assert_eq!(CallFailure::Refused.sent(), Sent::No);
        assert_eq!(CallFailure::Lost.sent(), Sent::Maybe);
        assert_eq!(CallFailure::ResponseTooLarge.sent(), Sent::Answered);
        assert!(CallFailure::Dns.message().starts_with("request failed"));
        assert_eq!(
            CallFailure::RedirectBlocked {
                scheme: Some(("https".into(), "http".into()))
            }
            .message(),
            "redirect blocked: scheme mismatch (allowlisted https, redirected to http)"
        );
    }
}
