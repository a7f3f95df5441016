//! The TLS file checks: one per configured file (`control_plane.tls`, `mcp.tls`, each
//! channel's own), named by its key, as the gateway would read it at startup. A
//! certificate that ends within [`EXPIRY_WARNING`] is a warning; an unusable file fails.
//! Details name the key, the path and the problem, never the file's contents.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::Check;
use crate::config::Config;
use crate::egress::tls::{inspect, FileReport, EXPIRY_WARNING};

/// One check per distinct configured file key, in scope order.
pub(super) fn checks(config: &Config, now: SystemTime) -> Vec<Check> {
    let mut scopes = vec![&config.control_plane.tls, &config.mcp.tls];
    scopes.extend(config.mcp.channel_tls.values());
    let mut seen = BTreeSet::new();
    scopes
        .into_iter()
        .flat_map(|files| inspect(files, now))
        .filter(|report| seen.insert(report.key.clone()))
        .map(|report| verdict(report, now))
        .collect()
}

fn verdict(report: FileReport, now: SystemTime) -> Check {
    let FileReport { key, path, result } = report;
    match result {
        Err(e) => Check::fail(key, format!("{} ({})", e.problem, e.kind())),
        Ok(None) => Check::ok(key, format!("{path}: a private key matching its certificate")),
        Ok(Some(end)) => {
            let left = end.duration_since(now).unwrap_or_default();
            let days = left.as_secs() / 86_400;
            let at = humantime::format_rfc3339_seconds(end);
            if left <= EXPIRY_WARNING {
                Check::warn(
                    key,
                    format!("{path}: the certificate expires at {at}, in {days} days: renew it"),
                )
            } else {
                Check::ok(key, format!("{path}: valid until {at} ({days} days)"))
            }
        }
    }
}
