//! The control-plane check: reachable, and the credentials accepted, through the tunnel
//! metadata request (`GET .../v1/tunnels/{tunnel_id}`) sent with the poll's own headers.
//!
//! Invariant: never polls. A poll could hand out a command that this process would then
//! never answer; the metadata request authenticates the same way and takes nothing.
//! Details name the configuration keys and the tunnel id, never the URL or the key.

use std::time::Duration;

use tokio::time::Instant;

use super::report::Check;
use crate::config::Config;
use crate::control::{ControlClient, LookupError};
use crate::egress::client::SendErrorKind;
use crate::telemetry::safe_token;

const NAME: &str = "control_plane";

/// How the metadata request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Status(u16),
    Net(NetFailure),
}

/// Why no HTTP answer arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NetFailure {
    Dns,
    Refused,
    Connect,
    Tls,
    Timeout,
    /// The connection was made, then failed before an answer.
    Transport,
}

/// What the details quote: identifiers and references only, never values or URLs.
struct Context {
    tunnel_id: String,
    api_key_ref: String,
    timeout: Duration,
}

/// Sends the metadata request and judges the answer.
pub(super) async fn check(config: &Config, client: &ControlClient, timeout: Duration) -> Check {
    let started = Instant::now();
    let mut tls_problem = None;
    let answer = match client.get_tunnel(timeout).await {
        Ok(status) => Answer::Status(status.as_u16()),
        Err(LookupError::Timeout) => Answer::Net(NetFailure::Timeout),
        Err(LookupError::Send(e)) => {
            let failure = classify(e.kind());
            if failure == NetFailure::Tls {
                tls_problem = crate::egress::tls::handshake_problem(e.chain());
            }
            Answer::Net(failure)
        }
    };
    let context = Context {
        tunnel_id: safe_token(&config.control_plane.tunnel_id),
        api_key_ref: config.control_plane.api_key.describe(),
        timeout,
    };
    let check = verdict(answer, &context, started.elapsed());
    match tls_problem {
        // A refused handshake names its problem (control_plane.tls).
        Some(problem) => Check::new(check.name, check.verdict, format!("{}: {problem}", check.detail)),
        None => check,
    }
}

/// The one mapping from an answer to a verdict and the words an operator acts on.
fn verdict(answer: Answer, c: &Context, elapsed: Duration) -> Check {
    let tunnel = &c.tunnel_id;
    match answer {
        Answer::Status(200) => Check::ok(
            NAME,
            format!(
                "reachable; credentials accepted for tunnel {tunnel} (HTTP 200 in {} ms; no command taken)",
                elapsed.as_millis()
            ),
        ),
        Answer::Status(status @ (401 | 403)) => Check::fail(
            NAME,
            format!(
                "credentials refused (HTTP {status}): control_plane.api_key ({}) is wrong, revoked or not allowed to use tunnel {tunnel}; fix the key and re-run",
                c.api_key_ref
            ),
        ),
        Answer::Status(404) => Check::fail(
            NAME,
            format!(
                "tunnel not found (HTTP 404): check control_plane.tunnel_id ({tunnel}), and control_plane.url_path if the service sits under a prefix"
            ),
        ),
        Answer::Status(400) => Check::fail(
            NAME,
            format!("request refused (HTTP 400): control_plane.tunnel_id ({tunnel}) is probably malformed"),
        ),
        Answer::Status(429) => Check::fail(
            NAME,
            "rate limited (HTTP 429): reachable, but the credentials could not be verified; re-run later",
        ),
        Answer::Status(status @ 300..=399) => Check::fail(
            NAME,
            format!(
                "redirected (HTTP {status}); redirects are not followed: check control_plane.base_url (scheme, host) and control_plane.url_path"
            ),
        ),
        Answer::Status(status @ 500..=599) => Check::fail(
            NAME,
            format!(
                "control-plane error (HTTP {status}): reachable, but the credentials could not be verified; retry later"
            ),
        ),
        Answer::Status(status) => Check::fail(
            NAME,
            format!(
                "unexpected answer (HTTP {status}): is control_plane.base_url (with control_plane.url_path) the tunnel service?"
            ),
        ),
        Answer::Net(failure) => Check::fail(NAME, net_words(failure, "control_plane.base_url", c.timeout)),
    }
}

/// What a failure to get an answer means, for the endpoint configured under `key`.
pub(super) fn net_words(failure: NetFailure, key: &str, timeout: Duration) -> String {
    match failure {
        NetFailure::Dns => format!("cannot resolve the host of {key} (DNS): check the host name and the resolver"),
        NetFailure::Refused => {
            format!("connection refused: nothing listens at the host and port of {key}; is the server up?")
        }
        NetFailure::Connect => {
            format!("cannot connect to the host of {key} (unreachable or filtered)")
        }
        NetFailure::Tls => {
            format!("TLS handshake failed with the host of {key}: check the scheme and the server's certificate")
        }
        NetFailure::Timeout => format!(
            "timeout: no answer within {} from the host of {key} (slow, filtered or unreachable; --timeout waits longer)",
            humantime::format_duration(timeout)
        ),
        NetFailure::Transport => format!(
            "the connection to the host of {key} failed before an answer (reset or closed): check it and anything in between"
        ),
    }
}

/// Names why a request got no HTTP answer, one row per kind of the client's error: a
/// timeout while connecting is a timeout; a proxy's refusal is a failed connect.
fn classify(kind: SendErrorKind) -> NetFailure {
    match kind {
        SendErrorKind::ConnectTimeout | SendErrorKind::Timeout => NetFailure::Timeout,
        SendErrorKind::Dns => NetFailure::Dns,
        SendErrorKind::Refused => NetFailure::Refused,
        SendErrorKind::Tls => NetFailure::Tls,
        SendErrorKind::Connect | SendErrorKind::ProxyRefused | SendErrorKind::ProxyAuth => NetFailure::Connect,
        SendErrorKind::Lost => NetFailure::Transport,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Verdict;

    fn context() -> Context {
        Context {
            tunnel_id: "tunnel_abc".to_owned(),
            api_key_ref: "env:CONTROL_PLANE_API_KEY".to_owned(),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn every_answer_maps_to_one_verdict_naming_what_to_fix() {
        use NetFailure as N;
        let ok = (Answer::Status(200), "credentials accepted for tunnel tunnel_abc");
        let fails: [(Answer, &str); 13] = [
            (
                Answer::Status(401),
                "credentials refused (HTTP 401): control_plane.api_key (env:CONTROL_PLANE_API_KEY)",
            ),
            (Answer::Status(403), "credentials refused (HTTP 403)"),
            (
                Answer::Status(404),
                "tunnel not found (HTTP 404): check control_plane.tunnel_id (tunnel_abc)",
            ),
            (
                Answer::Status(400),
                "control_plane.tunnel_id (tunnel_abc) is probably malformed",
            ),
            (Answer::Status(429), "rate limited"),
            (Answer::Status(308), "redirects are not followed"),
            (Answer::Status(503), "control-plane error (HTTP 503)"),
            (Answer::Status(204), "unexpected answer (HTTP 204)"),
            (Answer::Net(N::Dns), "cannot resolve the host of control_plane.base_url"),
            (Answer::Net(N::Refused), "connection refused"),
            (Answer::Net(N::Tls), "TLS handshake failed"),
            (Answer::Net(N::Timeout), "timeout: no answer within 5s"),
            (Answer::Net(N::Transport), "failed before an answer"),
        ];
        let cases = std::iter::once((ok.0, Verdict::Ok, ok.1)).chain(fails.map(|(a, w)| (a, Verdict::Fail, w)));
        for (answer, verdict, words) in cases {
            let check = verdict_of(answer);
            assert_eq!(check.name, "control_plane");
            assert_eq!(check.verdict, verdict, "{answer:?}");
            assert!(check.detail.contains(words), "{answer:?}: {}", check.detail);
        }
        assert!(verdict_of(Answer::Net(N::Connect)).detail.contains("cannot connect"));
    }

    fn verdict_of(answer: Answer) -> Check {
        verdict(answer, &context(), Duration::from_millis(12))
    }

    #[test]
    fn each_send_error_kind_maps_to_one_net_failure() {
        use SendErrorKind as K;
        let cases = [
            (K::ConnectTimeout, NetFailure::Timeout),
            (K::Timeout, NetFailure::Timeout),
            (K::Dns, NetFailure::Dns),
            (K::Refused, NetFailure::Refused),
            (K::Tls, NetFailure::Tls),
            (K::Connect, NetFailure::Connect),
            (K::ProxyRefused, NetFailure::Connect),
            (K::ProxyAuth, NetFailure::Connect),
            (K::Lost, NetFailure::Transport),
        ];
        for (kind, want) in cases {
            assert_eq!(classify(kind), want, "{kind:?}");
        }
    }
}
