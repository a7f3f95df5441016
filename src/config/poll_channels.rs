//! `control_plane.poll_channels`: the official client's poll filter, checked once.
//!
//! Invariants of the result: sorted (byte order) and without duplicates, each entry a
//! valid channel name that is also configured in `mcp.channels` (or `harpoon`, the
//! gateway's built-in channel); empty means "not
//! configured". A listed channel this replica does not serve is an error rather than a
//! warning: the control plane hands a poller only the channels it names, so a replica
//! that names a channel it cannot route would take that channel's commands and answer
//! each "not executed" (a share of them that another replica could have served).
//! Duplicates are harmless and folded; blanks and invalid names are errors naming the
//! entry (`control_plane.poll_channels[i]`, 0-based).

use std::collections::{BTreeMap, BTreeSet};

use super::error::ConfigError;
use super::{ChannelConfig, ChannelName};

const KEY: &str = "control_plane.poll_channels";

/// The checked filter; `raw` is the list as configured (`None`: not configured).
pub(super) fn poll_channels(
    raw: Option<Vec<String>>,
    configured: &BTreeMap<ChannelName, ChannelConfig>,
) -> Result<Vec<ChannelName>, ConfigError> {
    let mut names = BTreeSet::new();
    for (i, name) in raw.unwrap_or_default().iter().enumerate() {
        let key = format!("{KEY}[{i}]");
        if name.trim().is_empty() {
            return Err(ConfigError::invalid(
                key,
                "is empty; name a channel of mcp.channels, e.g. \"main\"",
            ));
        }
        let name = ChannelName::parse_at(&key, name)?;
        // `harpoon` is the gateway's own channel: it is always served.
        if name.as_str() != "harpoon" && !configured.contains_key(name.as_str()) {
            let known: Vec<&str> = configured.keys().map(ChannelName::as_str).collect();
            return Err(ConfigError::invalid(
                key,
                format!(
                    "{name:?} is not a configured channel (mcp.channels has {}): the control plane would hand this \
                     replica that channel's commands and it could only answer them \"not executed\"; configure \
                     [mcp.channels.{name}] here, or leave it to the replicas that serve it",
                    known.join(", ")
                ),
            ));
        }
        names.insert(name);
    }
    Ok(names.into_iter().collect())
}

/// `CONTROL_PLANE_POLL_CHANNELS` as the official client writes it: names separated by
/// `,`, each trimmed (a blank entry stays, so that validation names it).
pub(super) fn split_env(value: &str) -> Vec<String> {
    value.split(',').map(|name| name.trim().to_owned()).collect()
}
