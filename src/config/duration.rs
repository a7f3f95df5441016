//! Duration settings: humantime text (`"10s"`, `"250ms"`), some of which must be positive.
//!
//! Shared by the section rules in `validation` and the channel rules in `channel`; it
//! imports neither.

use std::time::Duration;

use super::error::ConfigError;

/// A humantime duration such as "30s", "250ms" or "1m".
pub(super) fn duration(key: &str, value: Option<String>, default: &str) -> Result<Duration, ConfigError> {
    let text = value.as_deref().unwrap_or(default);
    humantime::parse_duration(text)
        .map_err(|_| ConfigError::invalid(key, format!("{text:?} is not a duration (use e.g. \"10s\", \"250ms\")")))
}

pub(super) fn positive_duration(key: &str, value: Option<String>, default: &str) -> Result<Duration, ConfigError> {
    let parsed = duration(key, value, default)?;
    if parsed.is_zero() {
        return Err(ConfigError::invalid(
            key,
            "must be greater than zero (use e.g. \"10s\", \"250ms\")",
        ));
    }
    Ok(parsed)
}
