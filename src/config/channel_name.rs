//! [`ChannelName`]: the name of one `[mcp.channels.NAME]` entry, checked once at load.
//!
//! Invariant: matches `[A-Za-z0-9_-]{1,64}` (names are sent in a header and used as
//! metric labels). This is a configured channel; the name a command asks for on the wire
//! is `protocol::ChannelName`, which may name no channel at all. The two meet as text
//! (`Borrow<str>` lets the channel map be looked up by a wire name).

use std::borrow::Borrow;

use super::error::ConfigError;
use super::text::str_views;

const MAX_CHANNEL_NAME: usize = 64;

/// A configured channel's name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelName(String);

str_views!(ChannelName, |this| &this.0);

impl ChannelName {
    /// Checks a name from the configuration; errors name `mcp.channels`.
    pub fn parse(name: &str) -> Result<ChannelName, ConfigError> {
        ChannelName::parse_at("mcp.channels", name)
    }

    /// [`ChannelName::parse`], with errors naming `key` (a list entry that names a
    /// channel, e.g. `control_plane.poll_channels[0]`).
    pub(super) fn parse_at(key: &str, name: &str) -> Result<ChannelName, ConfigError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if name.is_empty() || name.len() > MAX_CHANNEL_NAME || !name.chars().all(allowed) {
            let problem = format!(
                "channel name {name:?} is not allowed: use 1 to {MAX_CHANNEL_NAME} letters, digits, '_' or '-' (it is sent in a header and used as a metric label)"
            );
            return Err(ConfigError::invalid(key, problem));
        }
        Ok(ChannelName(name.to_owned()))
    }
}

/// Consistent with `Eq`, `Ord` and `Hash`: all of them compare the text alone.
impl Borrow<str> for ChannelName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<ChannelName> for String {
    fn from(name: ChannelName) -> String {
        name.0
    }
}
