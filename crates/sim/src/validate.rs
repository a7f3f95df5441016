//! Pure checks of what reaches the control-plane endpoints, and the error bodies
//! (`APIErrorResponse`) the simulator answers with.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::fault::parse_resp_type;
use super::state::GatewayReply;

/// A rejected request: status, stable error code and a message naming the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// A response POST body that satisfies `TunnelResponsePayload`.
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) request_id: String,
    pub(crate) reply: GatewayReply,
}

const PAYLOAD_FIELDS: [&str; 6] = [
    "request_id",
    "channel",
    "resp_json",
    "resp_headers",
    "resp_code",
    "resp_type",
];

#[derive(Deserialize)]
struct RawJson<'a> {
    #[serde(borrow, default)]
    resp_json: Option<&'a RawValue>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// `{"error":{"message","type","param","code"}}`, as the contract's `APIErrorResponse`.
    pub(crate) fn body(&self) -> Bytes {
        let kind = if self.status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let body = serde_json::json!({
            "error": { "message": self.message, "type": kind, "param": null, "code": self.code }
        });
        Bytes::from(serde_json::to_vec(&body).expect("a json! value serializes"))
    }

    /// The error an injected status fault answers with.
    pub(crate) fn for_fault(status: u16) -> Self {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let code = match status.as_u16() {
            400 => "invalid_json_payload",
            401 => "tunnel_use_forbidden",
            404 => "pending_request_not_found",
            413 => "request_body_too_large",
            429 => "rate_limit_exceeded",
            503 => "tunnel_transport_unavailable",
            _ => "simulated_fault",
        };
        Self::new(status, code, format!("simulated fault: status {}", status.as_u16()))
    }
}

/// `tunnel_<32 lowercase alphanumeric>`, the format the service accepts.
pub(crate) fn is_tunnel_id_format(id: &str) -> bool {
    id.strip_prefix("tunnel_")
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Lowercase letters, digits, hyphens and underscores.
pub(crate) fn is_channel_format(channel: &str) -> bool {
    !channel.is_empty()
        && channel
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Bearer key first (`401`), then the tunnel id (`400` malformed, `404` another tunnel).
pub(crate) fn check_caller(
    headers: &HeaderMap,
    api_key: &str,
    path_tunnel: &str,
    tunnel_id: &str,
) -> Result<(), ApiError> {
    let expected = format!("Bearer {api_key}");
    if headers.get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes) != Some(expected.as_bytes()) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing or incorrect bearer API key",
        ));
    }
    if path_tunnel == tunnel_id {
        return Ok(());
    }
    if !is_tunnel_id_format(path_tunnel) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_tunnel_id_format",
            "tunnel id is not tunnel_<32 lowercase alphanumeric>",
        ));
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "tunnel_not_found",
        "no such tunnel",
    ))
}

/// The `X-Tunnel-Shard-Token` of a response POST: required, and checked before the body
/// is read. Whether it is the token of the request the body names is decided later.
pub(crate) fn shard_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    headers
        .get("x-tunnel-shard-token")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "tunnel_request_mismatch",
                "X-Tunnel-Shard-Token is required",
            )
        })
}

/// `Content-Type` is `application/json` (parameters allowed).
pub(crate) fn is_json_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Validates a response POST body against `TunnelResponsePayload`
/// (`additionalProperties: false`, `request_id` and `resp_code` required).
pub(crate) fn payload(body: &Bytes, accept_resp_timing: bool) -> Result<Payload, ApiError> {
    let bad = |msg: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json_payload", msg);
    let value = members(body, accept_resp_timing).map_err(bad)?;
    let obj = value.as_object().expect("members returns an object");
    let request_id = match obj.get("request_id") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("request_id is not a string".to_owned())),
        None => return Err(bad("request_id is required".to_owned())),
    };
    let resp_code = match obj.get("resp_code") {
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad("resp_code is not an integer".to_owned()))?,
        None => return Err(bad("resp_code is required".to_owned())),
    };
    match obj.get("channel") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::String(c)) if is_channel_format(c) => {}
        Some(serde_json::Value::String(_)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_channel_format",
                "channel has unsupported characters",
            ));
        }
        Some(_) => return Err(bad("channel is not a string or null".to_owned())),
    }
    if !matches!(
        obj.get("resp_json"),
        None | Some(serde_json::Value::Null | serde_json::Value::Object(_))
    ) {
        return Err(bad("resp_json is not an object or null".to_owned()));
    }
    let resp_headers = match obj.get("resp_headers") {
        None => Vec::new(),
        Some(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(name, values)| {
                let values = values.as_array().and_then(|a| {
                    a.iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                });
                values
                    .map(|v| (name.clone(), v))
                    .ok_or_else(|| bad(format!("resp_headers.{name} is not an array of strings")))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("resp_headers is not an object".to_owned())),
    };
    let resp_type = match obj.get("resp_type") {
        None => crate::protocol::RespType::JsonrpcResponse,
        Some(serde_json::Value::String(s)) => {
            parse_resp_type(s).ok_or_else(|| bad(format!("resp_type `{s}` is not a ResponsePayloadType")))?
        }
        Some(_) => return Err(bad("resp_type is not a string".to_owned())),
    };
    let raw: RawJson<'_> = serde_json::from_slice(body).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let resp_json = raw.resp_json.map(|r| Bytes::copy_from_slice(r.get().as_bytes()));
    Ok(Payload {
        request_id,
        reply: GatewayReply {
            resp_type,
            resp_code,
            resp_json,
            resp_headers,
        },
    })
}

/// The body as a JSON object whose members are all known (`resp_timing` too when
/// accepted, and then in its shape), or why not; an escaped lone surrogate anywhere is
/// refused first, as the service refuses it.
fn members(body: &Bytes, accept_resp_timing: bool) -> Result<serde_json::Value, String> {
    if crate::protocol::has_lone_surrogate(body) {
        return Err("the body carries an unpaired surrogate escape".to_owned());
    }
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let obj = value.as_object().ok_or("body is not a JSON object")?;
    let known = |k: &String| PAYLOAD_FIELDS.contains(&k.as_str()) || (accept_resp_timing && k == "resp_timing");
    if let Some(extra) = obj.keys().find(|k| !known(k)) {
        return Err(format!("unknown field `{extra}`"));
    }
    if let Some(timing) = obj.get("resp_timing") {
        resp_timing(timing).map_err(|why| format!("resp_timing {why}"))?;
    }
    Ok(value)
}

/// A `resp_timing` as the 2026-08-25 wire writes it: version 1, transport `stdio` or
/// `streamable_http`, `target_elapsed_us` an integer of 0 to a day in microseconds.
fn resp_timing(timing: &serde_json::Value) -> Result<(), &'static str> {
    let obj = timing.as_object().ok_or("is not an object")?;
    if obj.get("version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Err("has no version 1");
    }
    match obj.get("transport").and_then(serde_json::Value::as_str) {
        Some("stdio" | "streamable_http") => {}
        _ => return Err("names no known transport"),
    }
    match obj.get("target_elapsed_us").and_then(serde_json::Value::as_u64) {
        Some(us) if us <= 86_400_000_000 => Ok(()),
        _ => Err("has no target_elapsed_us of 0 to 86400000000"),
    }
}
