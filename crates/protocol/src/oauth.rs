//! `oauth_discovery`'s answer when discovery could not produce a document: a closed set
//! of failures, each with the status, code and words the caller acts on.
//!
//! The body has the shape the official client posts for an unsupported channel,
//! `{"error":{"message","type","code"}}`; tunnelgate posts it for every failure, where
//! the official client posts nothing and leaves its caller to time out. Messages never
//! carry URLs, bodies or header values; the only caller-supplied text is a channel name,
//! and only when it is short and plain.

use serde_json::value::RawValue;

/// Why discovery produced no metadata document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscoveryFailure {
    /// The channel is not configured, or is not an HTTP channel (stdio).
    UnsupportedChannel,
    /// The gateway did not run discovery: it is stopping, or strict mode's latch is set.
    NotExecuted,
    /// No candidate URL served metadata (each was 404, 5xx or unreachable, with at least
    /// one answered by the server).
    NoMetadata,
    /// The response discovery stopped on was not usable protected-resource metadata.
    InvalidMetadata,
    /// No candidate could be reached at all (DNS, connect, TLS, connection lost).
    Unreachable,
    /// The time bound passed (the command's `response_timeout`, or the gateway's own).
    TimedOut,
}

impl DiscoveryFailure {
    /// Every failure, for tables and tests.
    pub const ALL: [Self; 6] = [
        Self::UnsupportedChannel,
        Self::NotExecuted,
        Self::NoMetadata,
        Self::InvalidMetadata,
        Self::Unreachable,
        Self::TimedOut,
    ];

    /// `error.code` in the answer, and the stable label in logs (API: never rename one).
    pub fn code(self) -> &'static str {
        match self {
            Self::UnsupportedChannel => "unsupported_channel",
            Self::NotExecuted => "not_executed",
            Self::NoMetadata => "metadata_not_found",
            Self::InvalidMetadata => "invalid_metadata",
            Self::Unreachable => "server_unreachable",
            Self::TimedOut => "discovery_timeout",
        }
    }

    /// `resp_code` of the answer.
    pub fn resp_code(self) -> u16 {
        match self {
            Self::UnsupportedChannel => 400,
            Self::NoMetadata => 404,
            Self::InvalidMetadata | Self::Unreachable => 502,
            Self::NotExecuted => 503,
            Self::TimedOut => 504,
        }
    }

    /// `error.type` of the answer.
    fn error_type(self) -> &'static str {
        match self {
            Self::UnsupportedChannel => "invalid_request_error",
            Self::NoMetadata => "not_found_error",
            Self::NotExecuted | Self::InvalidMetadata | Self::Unreachable | Self::TimedOut => "server_error",
        }
    }

    /// The sentence the caller reads (`error.message`), bar the channel name.
    pub fn message(self) -> &'static str {
        match self {
            Self::UnsupportedChannel => {
                "OAuth discovery runs only on a configured HTTP MCP channel; this one is not configured or is a stdio channel"
            }
            Self::NotExecuted => {
                "OAuth discovery was not run: the gateway is stopping or its strict-mode latch is set; safe to retry"
            }
            Self::NoMetadata => {
                "the MCP server publishes no OAuth protected-resource metadata (RFC 9728): no resource_metadata in WWW-Authenticate and no document at its well-known URLs; it may not use OAuth"
            }
            Self::InvalidMetadata => {
                "the MCP server's OAuth protected-resource metadata is unusable: not a JSON object with a non-empty resource, over 1 MiB, or with an authorization_servers[0] that is not a URL"
            }
            Self::Unreachable => {
                "the MCP server could not be reached for OAuth discovery (DNS, connect, TLS or a lost connection); safe to retry"
            }
            Self::TimedOut => {
                "OAuth discovery did not finish within its time bound (the command's response_timeout or the gateway's own); safe to retry"
            }
        }
    }
}

/// The `resp_json` of a failed discovery on `channel`.
pub fn discovery_error(failure: DiscoveryFailure, channel: &str) -> Box<RawValue> {
    let message = match failure {
        DiscoveryFailure::UnsupportedChannel if is_plain_name(channel) => {
            format!("unsupported channel \"{channel}\": {}", failure.message())
        }
        _ => failure.message().to_owned(),
    };
    let body = serde_json::json!({
        "error": { "message": message, "type": failure.error_type(), "code": failure.code() }
    });
    serde_json::value::to_raw_value(&body).expect("a json! value serializes")
}

/// A channel name safe to echo: short, lowercase letters, digits, `-` and `_`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_a_distinct_code_an_error_status_and_words() {
        let mut codes: Vec<_> = DiscoveryFailure::ALL.iter().map(|f| f.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), DiscoveryFailure::ALL.len());
        for f in DiscoveryFailure::ALL {
            assert!(f.resp_code() >= 400, "{f:?}");
            let v: serde_json::Value = serde_json::from_str(discovery_error(f, "main").get()).unwrap();
            assert_eq!(v["error"]["code"], f.code());
            assert!(v["error"]["message"].as_str().unwrap().len() > 20);
            assert!(v["error"]["type"].is_string());
        }
    }

    #[test]
    fn the_unsupported_channel_answer_names_a_plain_channel_only() {
        let v: serde_json::Value =
            serde_json::from_str(discovery_error(DiscoveryFailure::UnsupportedChannel, "local").get()).unwrap();
        assert_eq!(v["error"]["code"], "unsupported_channel");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("unsupported channel \"local\""));
        let hostile = "a\"b\n".repeat(40);
        let v: serde_json::Value =
            serde_json::from_str(discovery_error(DiscoveryFailure::UnsupportedChannel, &hostile).get()).unwrap();
        assert!(!v["error"]["message"].as_str().unwrap().contains("a\"b"));
    }
}
