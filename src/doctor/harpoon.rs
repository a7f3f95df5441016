//! The `harpoon.LABEL` checks: each configured target of channel `harpoon` answers a
//! `HEAD` (or a `GET` where `HEAD` is refused), which changes nothing, through the
//! channel's own client (`harpoon.proxy`, `harpoon.tls`). Any HTTP status passes: the
//! target is reachable; DNS, a refused connection, TLS or a timeout fails, in words.
//!
//! A template target (`call_target_template`) is checked the same way at its origin's
//! root (`/`): its path and query are never rendered, since nothing but a caller's
//! parameters may fill them. The line names its parameters.
//!
//! Targets registered from discovery do not exist yet when `doctor` runs: only the
//! configured ones are checked. Shows each target's `scheme://host[:port]` only.

use std::sync::Arc;
use std::time::Duration;

use super::report::Check;
use crate::config::Config;
use crate::downstream::HarpoonTransport;
use crate::telemetry::Metrics;

pub(super) async fn checks(config: &Config, metrics: &Arc<Metrics>, timeout: Duration) -> Vec<Check> {
    if config.harpoon.targets.is_empty() && config.harpoon.templates.is_empty() {
        return Vec::new();
    }
    let settings = crate::app::harpoon_settings(config);
    let harpoon = match HarpoonTransport::new(settings, Arc::default(), metrics.clone()) {
        Ok(h) => h,
        Err(e) => return vec![Check::fail("harpoon", e.to_string())],
    };
    harpoon
        .probe_targets(timeout)
        .await
        .into_iter()
        .map(|(label, origin, result)| {
            let name = format!("harpoon.{label}");
            let template = config.harpoon.templates.iter().find(|t| t.label == label);
            let what = match template {
                Some(t) => format!(
                    "template v{} (GET, parameters: {}; no redirects): {origin}/",
                    t.version,
                    t.parameters
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => origin.clone(),
            };
            match result {
                Ok(status) => Check::ok(
                    name,
                    format!("{what} answered HTTP {status} (HEAD or GET; nothing changed)"),
                ),
                Err(problem) => Check::fail(
                    name,
                    format!("{what}: {problem}; check harpoon.targets, harpoon.proxy and harpoon.tls"),
                ),
            }
        })
        .collect()
}
