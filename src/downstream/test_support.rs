//! What the transports' tests share: the caller's words and the assertion of a row of
//! `docs/downstream-faults.md`, which both transports' legs must satisfy alike.
//!
//! Test-only (declared under `#[cfg(test)]`); it builds no transport and knows neither.

use super::{LegFailure, LegOutcome, LegResult};

/// The caller's words, as `docs/downstream-faults.md` spells them (N, A, R).
pub(super) const N: &str = "not delivered to the MCP server; safe to retry";
pub(super) const A: &str = "effect unknown: the MCP server may have acted; check before retrying";
pub(super) const R: &str = "the MCP server refused the request with an HTTP error and no JSON-RPC response";

/// The leg's JSON reply, parsed.
pub(super) fn response_json(result: &LegResult) -> serde_json::Value {
    serde_json::from_str(result.reply.resp_json.as_ref().expect("a JSON reply").get()).unwrap()
}

/// A failed leg as its row in `docs/downstream-faults.md` states it: the failure and the
/// outcome, the `tunnel_failure` source and `transport_error_kind` (`None`: none given),
/// and the words of the synthesized error the caller reads.
#[track_caller]
pub(super) fn assert_row(
    result: &LegResult,
    failure: LegFailure,
    outcome: LegOutcome,
    source: &str,
    kind: Option<&str>,
    words: &str,
) {
    assert_eq!(result.failure.as_ref(), Some(&failure));
    assert_eq!(result.outcome, outcome);
    let v = response_json(result);
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], words);
    let tf = &v["error"]["data"]["tunnel_failure"];
    assert_eq!(tf["source"], source);
    assert_eq!(tf.get("transport_error_kind").and_then(|k| k.as_str()), kind);
}

/// The row of a leg whose deadline passed after the write: abandoned, effect unknown.
#[track_caller]
pub(super) fn assert_timed_out_after_write(result: &LegResult) {
    assert_row(
        result,
        LegFailure::TimeoutAfterWrite,
        LegOutcome::Abandoned,
        "timeout",
        Some("timeout"),
        A,
    );
}

/// The row of a leg the fence did not admit: nothing was sent.
#[track_caller]
pub(super) fn assert_not_admitted(result: &LegResult) {
    assert_row(
        result,
        LegFailure::NotAdmitted,
        LegOutcome::NotSent,
        "client_internal",
        None,
        N,
    );
}
