//! The body of `POST .../response` (schema `TunnelResponsePayload`).

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::{ChannelName, RequestId};

/// `resp_type`: zero or more `jsonrpc_notify`, then exactly one final: one of the
/// contract's three, or `oauth_discovery_response` (the observed extension that answers
/// `oauth_discovery`, see `contract/README.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RespType {
    JsonrpcResponse,
    JsonrpcNotify,
    NotifyAck,
    SessionTerminationResponse,
    OauthDiscoveryResponse,
}

impl RespType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonrpcResponse => "jsonrpc_response",
            Self::JsonrpcNotify => "jsonrpc_notify",
            Self::NotifyAck => "notify_ack",
            Self::SessionTerminationResponse => "session_termination_response",
            Self::OauthDiscoveryResponse => "oauth_discovery_response",
        }
    }

    /// Whether this response finishes the command (everything but `jsonrpc_notify`).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::JsonrpcNotify)
    }
}

/// One response POST body. Serialized once; every retry sends the identical bytes.
#[derive(Debug, Serialize)]
pub struct ResponseBody<'a> {
    pub request_id: &'a RequestId,
    pub channel: &'a ChannelName,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resp_json: Option<&'a RawValue>,
    pub resp_headers: &'a BTreeMap<String, Vec<String>>,
    pub resp_code: u16,
    pub resp_type: RespType,
    /// Wire 2026-08-25, opt-in (`control_plane.resp_timing`): only on a terminal
    /// `jsonrpc_response` the MCP server itself gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resp_timing: Option<RespTiming>,
}

/// `resp_timing` of a terminal response: how long the MCP server took to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RespTiming {
    version: u8,
    transport: &'static str,
    target_elapsed_us: u64,
}

impl RespTiming {
    /// The largest value the wire carries (a day, in microseconds).
    const MAX_US: u64 = 86_400_000_000;

    /// The timing of an answer `elapsed` after its write began, on `transport`
    /// (`stdio` or `streamable_http`), truncated to whole microseconds; `None` past a day.
    pub fn new(transport: &'static str, elapsed: std::time::Duration) -> Option<Self> {
        let us = u64::try_from(elapsed.as_micros())
            .ok()
            .filter(|us| *us <= Self::MAX_US)?;
        Some(Self {
            version: 1,
            transport,
            target_elapsed_us: us,
        })
    }
}

impl ResponseBody<'_> {
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(
            serde_json::to_vec(self).expect("response bodies hold only strings, numbers, maps and valid raw JSON"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_is_whole_microseconds_and_never_past_a_day() {
        let timing = RespTiming::new("stdio", std::time::Duration::from_nanos(123_456_789)).unwrap();
        assert_eq!(
            serde_json::to_string(&timing).unwrap(),
            r#"{"version":1,"transport":"stdio","target_elapsed_us":123456}"#
        );
        assert!(RespTiming::new("stdio", std::time::Duration::from_secs(86_400)).is_some());
        assert!(RespTiming::new("stdio", std::time::Duration::from_secs(86_401)).is_none());
    }

    #[test]
    fn raw_payloads_are_embedded_byte_for_byte() {
        let raw = RawValue::from_string(
            r#"{"z":1,"jsonrpc":"2.0","id":"a","result":{"b":2,"a":1},"x-vendor":[1.50]}"#.into(),
        )
        .unwrap();
        let headers = crate::json_resp_headers();
        let body = ResponseBody {
            request_id: &RequestId::new("req_1"),
            channel: &ChannelName::main(),
            resp_json: Some(&raw),
            resp_headers: &headers,
            resp_code: 200,
            resp_type: RespType::JsonrpcResponse,
            resp_timing: None,
        };
        let text = String::from_utf8(body.to_bytes().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"request_id":"req_1","channel":"main","resp_json":{"z":1,"jsonrpc":"2.0","id":"a","result":{"b":2,"a":1},"x-vendor":[1.50]},"resp_headers":{"Content-Type":["application/json"]},"resp_code":200,"resp_type":"jsonrpc_response"}"#
        );
    }

    #[test]
    fn acks_carry_no_payload() {
        let body = ResponseBody {
            request_id: &RequestId::new("r"),
            channel: &ChannelName::new("side"),
            resp_json: None,
            resp_headers: &BTreeMap::new(),
            resp_code: 202,
            resp_type: RespType::NotifyAck,
            resp_timing: None,
        };
        let v: serde_json::Value = serde_json::from_slice(&body.to_bytes()).unwrap();
        assert!(v.get("resp_json").is_none());
        assert_eq!(v["resp_type"], "notify_ack");
        assert!(RespType::NotifyAck.is_terminal() && !RespType::JsonrpcNotify.is_terminal());
        for t in [
            RespType::JsonrpcResponse,
            RespType::JsonrpcNotify,
            RespType::NotifyAck,
            RespType::SessionTerminationResponse,
            RespType::OauthDiscoveryResponse,
        ] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
