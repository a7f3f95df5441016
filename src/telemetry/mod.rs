//! Telemetry: logging/tracing setup, every metric definition, redaction helpers.
//!
//! Observational only: nothing here may delay dispatch, delivery, the latch or exit by
//! more than a bounded flush. The rest of the crate uses `tracing` macros and the
//! intent-named methods of [`Metrics`].

pub mod logging;
pub mod metrics;
pub mod otlp;
mod redact;

pub use metrics::{DeliveryKind, DropReason, DurationLeg, Metrics};
pub use redact::{safe_method, safe_token};
