//! Log setup: JSON or text to stderr, filtered by `telemetry.log_level`.
//!
//! Payloads, bodies, header values, keys and tokens are never passed to `tracing` by
//! this crate, so no level can reveal them. The HTTP and TLS libraries underneath log
//! peer addresses and connection details at debug level; they are capped at `warn`
//! unless the filter names them explicitly (an operator's deliberate choice).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Output format of the structured log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Text,
}

/// Flushes nothing today (logs are written synchronously); kept so exporters added
/// later flush with a bounded timeout when it drops.
#[must_use]
pub struct TelemetryGuard {
    _private: (),
}

/// Libraries whose debug output names MCP server and control-plane addresses.
const QUIET_LIBRARIES: [&str; 9] = [
    "hyper",
    "hyper_util",
    "reqwest",
    "h2",
    "rustls",
    "rustls_platform_verifier",
    "tower",
    "axum",
    "mio",
];

/// The effective filter: the configured one, with the libraries above capped at `warn`
/// unless it names them.
pub fn filter_directives(level: &str) -> String {
    let mut directives = level.trim().to_owned();
    for lib in QUIET_LIBRARIES {
        let named = level
            .split(',')
            .any(|d| d.trim().split(['=', '[', ':']).next() == Some(lib));
        if !named {
            directives.push_str(&format!(",{lib}=warn"));
        }
    }
    directives
}

/// Installs the global subscriber. A second call (tests, embedders) is a no-op.
pub fn init(format: Format, level: &str) -> TelemetryGuard {
    let filter = EnvFilter::try_new(filter_directives(level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        Format::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        Format::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_target(false)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    drop(result);
    TelemetryGuard { _private: () }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_capped_unless_named() {
        let d = filter_directives("debug");
        assert!(d.starts_with("debug,") && d.contains("hyper_util=warn") && d.contains("reqwest=warn"));
        let d = filter_directives("info,reqwest=debug");
        assert!(d.contains("reqwest=debug") && !d.contains("reqwest=warn"));
        assert!(EnvFilter::try_new(filter_directives("tunnelgate=trace")).is_ok());
    }
}
