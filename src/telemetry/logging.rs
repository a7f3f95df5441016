//! Log setup: JSON or text to stderr, filtered by `telemetry.log_level`.
//!
//! Payloads, bodies, header values, keys and tokens are never passed to `tracing` by
//! this crate, so no level can reveal them.

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

/// Installs the global subscriber. A second call (tests, embedders) is a no-op.
pub fn init(format: Format, level: &str) -> TelemetryGuard {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
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
