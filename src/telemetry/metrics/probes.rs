//! The probes as series, for monitors that read them from `/metrics` (the official
//! client exports `liveness` and `readiness`): `tunnelgate_liveness` is 1 while the
//! process serves its ops listener, `tunnelgate_readiness` is what `/readyz` answers
//! (1 ready, 0 not), set from the same check at every scrape. Unlike the official
//! client's, which reports 1 for both whatever happens, ours never say ready while a
//! command could not be served.

use prometheus::{IntGauge, Registry};

use super::{int_gauge, Metrics};

/// The readiness gauge; the liveness gauge is set to 1 once and only read by scrapes.
pub(super) struct ProbeFamilies {
    readiness: IntGauge,
}

impl ProbeFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        let liveness = int_gauge(
            r,
            "liveness",
            "1 while the gateway process serves its ops listener (what /livez and /healthz answer).",
        );
        liveness.set(1);
        Self {
            readiness: int_gauge(
                r,
                "readiness",
                "1 when /readyz answers ready, 0 when it does not; set from the same check at every scrape.",
            ),
        }
    }
}

impl Metrics {
    /// `/readyz`'s answer at this scrape.
    pub(crate) fn set_readiness(&self, ready: bool) {
        self.probes.readiness.set(i64::from(ready));
    }
}
