//! `tunnelgate status --require-ready`: readiness as an exit code, for scripts, init
//! containers and deploy gates that cannot read JSON.
//!
//! The verdict is one pure function ([`exit_code`]) of what the gateway said: latched
//! wins (its category's code, 80-91), then ready (`0`), else [`NOT_READY`] (`3`). When
//! the gateway is not ready, `/readyz` is asked for its one-line reason, written to stderr
//! as `tunnelgate: not ready: REASON` (stdout keeps the `/status` document, as without
//! the flag). No gateway answering is an error of the caller (`1`). Reads only: it never
//! changes the gateway.

use super::CliError;
use crate::egress::client::{Client, LocalGetError};

/// The exit code of `status --require-ready` for a gateway that answers, is not
/// latched and is not ready (API: scripts test for it).
pub(super) const NOT_READY: u8 = 3;

/// What `/readyz` said.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Readyz {
    /// `200`.
    Ready,
    /// `503`, with the reason line (the body, `not ready: ...`, trimmed).
    NotReady(String),
}

/// The exit code: the latch's `latch_code` when latched (it never becomes ready), else
/// `0` when ready, else [`NOT_READY`].
fn exit_code(latch_code: Option<u8>, ready: bool) -> u8 {
    match (latch_code, ready) {
        (Some(code), _) => code,
        (None, true) => 0,
        (None, false) => NOT_READY,
    }
}

/// The exit code of `status --require-ready` for a gateway whose `/status` said
/// `latch_code` and `ready`: when it is not ready, asks `readyz` (the same listener's
/// `/readyz`) why, writes that line on stderr and decides by its answer, the later look.
///
/// # Cancel safety
/// Reads only; dropping it abandons one GET.
pub(super) async fn decide(
    client: &Client,
    readyz: url::Url,
    latch_code: Option<u8>,
    ready: bool,
) -> Result<u8, CliError> {
    if ready && latch_code.is_none() {
        return Ok(0);
    }
    let shown = readyz.to_string();
    let answer = ask(client, &readyz).await.map_err(|e| match e {
        Asked::Transport(e) => super::unreachable(&shown, &e),
        Asked::Unexpected(problem) => CliError::StatusUnreachable {
            url: shown.clone(),
            problem,
        },
    })?;
    match answer {
        Readyz::Ready => Ok(exit_code(latch_code, true)),
        Readyz::NotReady(reason) => {
            crate::stderr::line(format_args!("{reason}"));
            Ok(exit_code(latch_code, false))
        }
    }
}

/// Why `/readyz` gave no verdict.
enum Asked {
    Transport(LocalGetError),
    /// An answer that is not `/readyz`'s (another server on the port), in words.
    Unexpected(String),
}

/// One GET of `/readyz`, bounded by the status request's timeout.
async fn ask(client: &Client, url: &url::Url) -> Result<Readyz, Asked> {
    let (status, body) = super::get(client, url).await.map_err(Asked::Transport)?;
    match status.as_u16() {
        200 => Ok(Readyz::Ready),
        503 => Ok(Readyz::NotReady(reason_line(&body))),
        _ => Err(Asked::Unexpected(format!(
            "/readyz answered {status}, neither 200 (ready) nor 503 (not ready)"
        ))),
    }
}

/// Bound of the reason printed: `/readyz` writes one short line; anything longer is not
/// its answer and is cut.
const REASON_BYTES: usize = 512;

/// The first line of `/readyz`'s body, trimmed and bounded; `not ready` if it is empty.
fn reason_line(body: &str) -> String {
    let line = body.lines().next().unwrap_or_default().trim();
    let mut end = line.len().min(REASON_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    match &line[..end] {
        "" => "not ready".to_owned(),
        cut => cut.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_the_latchs_then_ready_then_not_ready() {
        for (latch, ready, want) in [
            (None, true, 0),
            (None, false, NOT_READY),
            (Some(80), false, 80),
            (Some(82), true, 82),
            (Some(89), false, 89),
            (Some(90), false, 90),
            (Some(91), false, 91),
        ] {
            assert_eq!(exit_code(latch, ready), want, "latch {latch:?}, ready {ready}");
        }
    }

    #[test]
    fn the_reason_is_readyzs_first_line_bounded() {
        assert_eq!(
            reason_line("not ready: draining: the gateway is stopping\n"),
            "not ready: draining: the gateway is stopping"
        );
        assert_eq!(reason_line("  not ready: x  \r\nsecond line\n"), "not ready: x");
        assert_eq!(reason_line(""), "not ready");
        let long = "é".repeat(REASON_BYTES);
        let cut = reason_line(&long);
        assert!(cut.len() <= REASON_BYTES && cut.chars().all(|c| c == 'é'), "{cut}");
    }
}
