//! The synthesized `-32603` error and its `tunnel_failure` v1 provenance.
//!
//! Used only when no valid JSON-RPC error can be recovered from the MCP server, or when
//! what it answered cannot be carried (a result too large for the tunnel). It never
//! carries bodies, URLs, exception text or secrets: only closed-set values.

use serde::Serialize;
use serde_json::value::RawValue;

/// What a caller is told when its request cannot have reached the MCP server.
pub const NOT_SENT_MESSAGE: &str = "not delivered to the MCP server; safe to retry";
/// What a caller is told when its request may have reached the MCP server and no answer
/// came back.
pub const ABANDONED_MESSAGE: &str = "effect unknown: the MCP server may have acted; check before retrying";

/// Where the words of [`TooLarge`] put the result's size.
const RESULT: &str = "its result";

/// A result the MCP server produced that the tunnel refused as larger than it accepts
/// (the control plane's `413 request_body_too_large`), by what produced it: the caller's
/// words say what ran, since a retry would run it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TooLarge {
    /// A `tools/call`: the tool ran.
    ToolCall,
    /// Any other request.
    Request,
}

/// `tunnel_failure.source` (closed set from the contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureSource {
    TargetHttp,
    Dns,
    Tls,
    Connect,
    TransportClosed,
    Timeout,
    Protocol,
    ClientInternal,
}

/// `error.data.tunnel_failure`, version 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TunnelFailure {
    pub version: u8,
    pub source: FailureSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport_error_kind: Option<&'static str>,
    pub upstream_response_received: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
}

impl TunnelFailure {
    pub fn new(source: FailureSource, kind: Option<&'static str>, received: bool, status: Option<u16>) -> Self {
        Self {
            version: 1,
            source,
            transport_error_kind: kind,
            upstream_response_received: received,
            upstream_status: status,
        }
    }
}

impl TooLarge {
    /// What produced a result, from the request's JSON-RPC method.
    pub fn of_method(method: Option<&str>) -> Self {
        match method {
            Some("tools/call") => Self::ToolCall,
            Some(_) | None => Self::Request,
        }
    }

    /// The fixed sentence (the delivery receipt's words); the caller's
    /// [`message`](Self::message) adds the size to it.
    pub fn words(self) -> &'static str {
        match self {
            Self::ToolCall => "the MCP server answered, but its result is larger than the tunnel accepts and could not be delivered; the tool ran, so a retry would run it again: ask for a smaller result",
            Self::Request => "the MCP server answered, but its result is larger than the tunnel accepts and could not be delivered; the request ran on the MCP server, so a retry would run it again: ask for a smaller result",
        }
    }

    /// What the caller reads: [`words`](Self::words) with the size of the result
    /// (`bytes`, the MCP server's JSON-RPC response as it was posted).
    pub fn message(self, bytes: usize) -> String {
        self.words().replacen(RESULT, &format!("{RESULT} of {bytes} bytes"), 1)
    }

    /// The provenance: the MCP server's response arrived (whole), and its body was too
    /// large to carry, as for a body over the gateway's own bound.
    pub fn failure() -> TunnelFailure {
        TunnelFailure::new(FailureSource::Protocol, Some("response_body_too_large"), true, None)
    }
}

#[derive(Serialize)]
struct ErrorResponse<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i32,
    message: &'a str,
    data: ErrorData<'a>,
}

#[derive(Serialize)]
struct ErrorData<'a> {
    tunnel_failure: &'a TunnelFailure,
}

/// A JSON-RPC `-32603` error for request `id` (or `null`) with provenance.
///
/// `message` must be one of the gateway's own fixed sentences (at most with a number of
/// its own put in, as [`TooLarge::message`] does), never text from a peer.
pub fn synthesize_error(id: Option<&RawValue>, message: &str, failure: &TunnelFailure) -> Box<RawValue> {
    let null = RawValue::from_string("null".to_owned()).expect("null is valid JSON");
    let body = ErrorResponse {
        jsonrpc: "2.0",
        id: id.unwrap_or(&null),
        error: ErrorObject {
            code: -32603,
            message,
            data: ErrorData {
                tunnel_failure: failure,
            },
        },
    };
    serde_json::value::to_raw_value(&body).expect("error responses serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesized_errors_echo_the_id_and_carry_provenance() {
        let id = RawValue::from_string(r#""rpc-9""#.into()).unwrap();
        let f = TunnelFailure::new(FailureSource::TargetHttp, Some("http_status"), true, Some(502));
        let raw = synthesize_error(Some(&id), NOT_SENT_MESSAGE, &f);
        let v: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
        assert_eq!(v["id"], "rpc-9");
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(
            v["error"]["data"]["tunnel_failure"],
            serde_json::json!({"version":1,"source":"target_http","transport_error_kind":"http_status","upstream_response_received":true,"upstream_status":502})
        );
    }

    #[test]
    fn a_too_large_result_is_named_with_its_size_and_what_ran() {
        let tool = TooLarge::of_method(Some("tools/call"));
        assert_eq!(tool, TooLarge::ToolCall);
        assert_eq!(TooLarge::of_method(Some("resources/read")), TooLarge::Request);
        assert_eq!(TooLarge::of_method(None), TooLarge::Request);
        let message = tool.message(2_097_152);
        assert!(
            message.contains("its result of 2097152 bytes is larger than the tunnel accepts"),
            "{message}"
        );
        assert!(
            message.contains("the tool ran, so a retry would run it again"),
            "{message}"
        );
        for kind in [TooLarge::ToolCall, TooLarge::Request] {
            // The receipt's words are the caller's message without the size.
            assert_eq!(kind.message(7).replacen(" of 7 bytes", "", 1), kind.words());
        }
        let id = RawValue::from_string("4".into()).unwrap();
        let raw = synthesize_error(Some(&id), &message, &TooLarge::failure());
        let v: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
        assert_eq!(v["id"], 4);
        assert_eq!(
            v["error"]["data"]["tunnel_failure"],
            serde_json::json!({"version":1,"source":"protocol","transport_error_kind":"response_body_too_large","upstream_response_received":true})
        );
    }

    #[test]
    fn a_missing_id_becomes_null_and_optional_fields_are_omitted() {
        let f = TunnelFailure::new(FailureSource::TransportClosed, None, false, None);
        let v: serde_json::Value = serde_json::from_str(synthesize_error(None, "m", &f).get()).unwrap();
        assert!(v["id"].is_null());
        let tf = v["error"]["data"]["tunnel_failure"].as_object().unwrap();
        assert!(!tf.contains_key("upstream_status") && !tf.contains_key("transport_error_kind"));
    }
}
