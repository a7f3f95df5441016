//! The synthesized `-32603` error and its `tunnel_failure` v1 provenance.
//!
//! Used only when no valid JSON-RPC error can be recovered from the MCP server. It never
//! carries bodies, URLs, exception text or secrets: only closed-set values.

use serde::Serialize;
use serde_json::value::RawValue;

/// What a caller is told when its request cannot have reached the MCP server.
pub const NOT_SENT_MESSAGE: &str = "not delivered to the MCP server; safe to retry";
/// What a caller is told when its request may have reached the MCP server and no answer
/// came back.
pub const ABANDONED_MESSAGE: &str = "effect unknown: the MCP server may have acted; check before retrying";

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
/// `message` must be one of the gateway's own fixed sentences, never text from a peer.
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
    fn a_missing_id_becomes_null_and_optional_fields_are_omitted() {
        let f = TunnelFailure::new(FailureSource::TransportClosed, None, false, None);
        let v: serde_json::Value = serde_json::from_str(synthesize_error(None, "m", &f).get()).unwrap();
        assert!(v["id"].is_null());
        let tf = v["error"]["data"]["tunnel_failure"].as_object().unwrap();
        assert!(!tf.contains_key("upstream_status") && !tf.contains_key("transport_error_kind"));
    }
}
