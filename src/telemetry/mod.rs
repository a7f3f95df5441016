//! Telemetry: logging/tracing setup, every metric definition, redaction helpers.
//!
//! Observational only: nothing here may delay dispatch, delivery, the latch or exit by
//! more than a bounded flush. The rest of the crate uses `tracing` macros and the
//! intent-named methods of [`Metrics`].
//!
//! Ground floor: imports no other module of the crate. Label values owned upstairs reach
//! the metrics through the [`LabelValue`] trait, implemented next to each enum.

mod label;
pub mod logging;
pub mod metrics;
pub mod otlp;
mod redact;

pub use label::{CommandType, DeliveryKind, DropReason, DurationLeg, LabelSets, LabelValue, PollResult, TaskKind};
pub use metrics::{Accounting, Metrics};
pub use redact::{safe_method, safe_token};
