//! The privacy-safe cause of a fatal latch: category, exit code, request id, channel,
//! JSON-RPC method and time. Never payloads, bodies, header values, keys, tokens or URLs.

use serde::{Deserialize, Serialize};

use super::FatalCategory;
use crate::telemetry::{safe_method, safe_token};

/// The cause returned to embedders, shown on `/status` and persisted in the latch file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fatal {
    pub category: FatalCategory,
    pub exit_code: u8,
    pub request_id: Option<String>,
    pub channel: Option<String>,
    pub method: Option<String>,
    /// RFC 3339, UTC, seconds.
    pub latched_at: String,
    /// Whether the latch file was written (false until it is, or when writing failed).
    pub persisted: bool,
}

/// Who the fence was serving when the latch fired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandRef {
    pub request_id: Option<String>,
    pub channel: Option<String>,
    pub method: Option<String>,
}

impl CommandRef {
    pub fn new(request_id: &str, channel: &str, method: Option<&str>) -> Self {
        Self {
            request_id: Some(request_id.to_owned()),
            channel: Some(channel.to_owned()),
            method: method.map(str::to_owned),
        }
    }
}

impl Fatal {
    pub fn new(category: FatalCategory, command: &CommandRef) -> Self {
        Self {
            category,
            exit_code: category.exit_code(),
            request_id: command.request_id.as_deref().map(safe_token),
            channel: command.channel.as_deref().map(safe_token),
            method: command.method.as_deref().map(safe_method),
            latched_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            persisted: false,
        }
    }

    /// One line for stderr and logs.
    pub fn one_line(&self) -> String {
        format!(
            "fatal latch: category={} exit_code={} request_id={} channel={} method={} latched_at={} ({})",
            self.category.as_str(),
            self.exit_code,
            self.request_id.as_deref().unwrap_or("-"),
            self.channel.as_deref().unwrap_or("-"),
            self.method.as_deref().unwrap_or("-"),
            self.latched_at,
            self.category.explanation(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_that_could_carry_text_are_masked() {
        let f = Fatal::new(
            FatalCategory::AckTimeout,
            &CommandRef::new("req_1\nINJECT", "main", Some("tools/call {\"secret\":1}")),
        );
        assert_eq!(f.request_id.as_deref(), Some("<unprintable>"));
        assert_eq!(f.method.as_deref(), Some("<other>"));
        assert_eq!(f.exit_code, 80);
        assert!(!f.one_line().contains('\n'));
    }

    #[test]
    fn ordinary_identifiers_are_kept() {
        let f = Fatal::new(
            FatalCategory::AckNotFound,
            &CommandRef::new("req_abc-1", "main", Some("tools/call")),
        );
        assert_eq!(f.request_id.as_deref(), Some("req_abc-1"));
        assert_eq!(f.method.as_deref(), Some("tools/call"));
        assert!(f
            .one_line()
            .starts_with("fatal latch: category=ack_not_found exit_code=82"));
    }
}
