//! [`TunnelId`]: `control_plane.tunnel_id`, checked once at load.
//!
//! Invariant: non-empty, free of whitespace, control characters and of `/ ? # %` (it is
//! placed in request paths).

use super::error::{ConfigError, ErrorKind};
use super::text::str_views;

const KEY: &str = "control_plane.tunnel_id";

/// The tunnel this gateway serves, as configured.
#[derive(Clone, PartialEq, Eq)]
pub struct TunnelId(String);

str_views!(TunnelId, |this| &this.0);

impl TunnelId {
    /// Checks a configured value; `None` and `""` are missing.
    pub fn parse(value: Option<String>) -> Result<TunnelId, ConfigError> {
        let value = value.filter(|v| !v.is_empty()).ok_or_else(|| {
            let fix = "set it in the config file or TUNNELGATE_CONTROL_PLANE__TUNNEL_ID / CONTROL_PLANE_TUNNEL_ID";
            ConfigError::new(ErrorKind::Missing, KEY, format!("missing; {fix}"))
        })?;
        let bad = |c: char| c.is_whitespace() || c.is_control() || matches!(c, '/' | '?' | '#' | '%');
        if value.chars().any(bad) {
            let problem = "must not contain whitespace, '/', '?', '#' or '%' (it is placed in request paths)";
            return Err(ConfigError::invalid(KEY, problem));
        }
        Ok(TunnelId(value))
    }
}
