//! The answers of a held call's rounds (pure): the `input_required` a caller gets while
//! its call is parked, and the refusal of a retry whose held call is gone.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{code, json_reply, Refusal};
use crate::downstream::Reply;

/// The interim answer of a held call: the server's pending requests, keyed, and the
/// token of the continuation (no cache hints: `input_required` is never cached).
pub(crate) fn input_required_reply(id: &RawValue, requests: Map<String, Value>, request_state: &str) -> Reply {
    let result = json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": request_state,
    });
    json_reply(id, "result", result, 200)
}

/// Why a continuation is refused (`data.reason`, and the metric's label).
pub(crate) use crate::telemetry::ContinuationRefusal as Gone;

/// The refusal's words for each reason.
fn gone_words(gone: Gone) -> &'static str {
    match gone {
        Gone::Expired => "the held call waited longer than the gateway keeps it",
        Gone::Restarted => "it was issued by another gateway process (restarted, or another replica)",
        Gone::Consumed => "it was already used to continue the call",
        Gone::Lost => "the held call is gone (its server session ended, or the call finished)",
        Gone::Tampered => "it is not a requestState this gateway issued",
        Gone::Mismatch => "it belongs to a call with another method or other parameters",
    }
}
/// The refusal of a continuation whose held call is gone: nothing was sent.
pub(crate) fn continuation_refused(id: &RawValue, gone: Gone) -> Reply {
    let mut refusal = Refusal::new(
        code::INVALID_PARAMS,
        format!(
            "Invalid or expired requestState: {}. The original call's effect is unknown and it was not run again",
            gone_words(gone)
        ),
    );
    refusal.data = Some(json!({"reason": gone.as_str()}));
    let mut reply = refusal.answer(id).reply;
    reply.resp_code = 400;
    reply
}
