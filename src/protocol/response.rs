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
    fn raw_payloads_are_embedded_byte_for_byte() {
        let raw = RawValue::from_string(
            r#"{"z":1,"jsonrpc":"2.0","id":"a","result":{"b":2,"a":1},"x-vendor":[1.50]}"#.into(),
        )
        .unwrap();
        let headers = crate::protocol::json_resp_headers();
        let body = ResponseBody {
            request_id: &RequestId::new("req_1"),
            channel: &ChannelName::main(),
            resp_json: Some(&raw),
            resp_headers: &headers,
            resp_code: 200,
            resp_type: RespType::JsonrpcResponse,
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
