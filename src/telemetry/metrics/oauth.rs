//! OAuth discovery's trust gate (`mcp.oauth_trusted_origins`): the metadata origins it
//! refused to read, by where the origin was named.
//!
//! Every source has its series from startup (at zero).

use prometheus::{IntCounterVec, Registry};

use super::{all, at_zero, counter_vec, Metrics};
use crate::telemetry::label::{LabelValue, OAuthOriginSource};

/// The origins OAuth discovery refused to read.
pub(super) struct OAuthFamilies {
    untrusted: IntCounterVec,
}

impl OAuthFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            untrusted: counter_vec(
                r,
                "oauth_untrusted_origins_total",
                "Metadata URLs OAuth discovery did not read because their origin is neither the MCP server's nor in mcp.oauth_trusted_origins, by where the URL was named.",
                &["source"],
            ),
        }
    }

    /// Every source, at zero.
    pub(super) fn series_at_zero(&self) {
        at_zero(&self.untrusted, all::<OAuthOriginSource>(), &[]);
    }
}

impl Metrics {
    /// OAuth discovery did not read a metadata URL named by `source`: its origin is not trusted.
    pub(crate) fn oauth_untrusted_origin(&self, source: OAuthOriginSource) {
        self.oauth.untrusted.with_label_values(&[source.as_label()]).inc();
    }
}
