//! Whole-number settings: counts and attempts that must be at least 1.
//!
//! Shared by the section rules in `validation` and the channel rules in `channel`; it
//! imports neither.

use std::num::{NonZeroU32, NonZeroUsize};

use super::error::ConfigError;

/// A count of at least 1 that fits a `usize`.
pub(super) fn count(key: &str, value: u64) -> Result<NonZeroUsize, ConfigError> {
    let value = usize::try_from(value).map_err(|_| ConfigError::invalid(key, format!("{value} is too large")))?;
    NonZeroUsize::new(value).ok_or_else(|| ConfigError::invalid(key, "must be at least 1 (found 0)"))
}

/// A number of attempts of at least 1 that fits a `u32`.
pub(super) fn attempts(key: &str, value: u64) -> Result<NonZeroU32, ConfigError> {
    let value = u32::try_from(value).map_err(|_| ConfigError::invalid(key, format!("{value} is too large")))?;
    NonZeroU32::new(value).ok_or_else(|| ConfigError::invalid(key, "must be at least 1 (found 0)"))
}
