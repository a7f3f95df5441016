//! Telemetry: logging/tracing setup, every metric definition, redaction helpers, W3C trace
//! context, span events, the names of every span attribute (`attrs`) and the ring of
//! recent log events.
//!
//! Observational only: nothing here may delay dispatch, delivery, the latch or exit by
//! more than a bounded flush. The rest of the crate uses `tracing` macros and the
//! intent-named methods of [`Metrics`].
//!
//! Ground floor: imports no other module of the crate. Label values owned upstairs reach
//! the metrics through the [`LabelValue`] trait and one marker trait per label, implemented
//! next to each enum (declared with `label_enum!`).

pub(crate) mod attrs;
pub(crate) mod events;
mod label;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod otlp;
mod propagation;
mod redact;
pub(crate) mod ring;

pub(crate) use label::label_enum;
#[cfg(test)]
pub(crate) use label::labels;
pub(crate) use label::{
    AttemptResultLabel, CommandType, ContinuationRefusal, CoordinationRole, DeliveryKind, DeliveryLabel, DropReason,
    DurationLeg, EraHandling, EraHeldEnd, FatalCategoryLabel, IntentOp, IntentOpResult, LabelSets, LabelValue,
    LegOutcomeLabel, OAuthOriginSource, PollErrorLabel, PollResult, ReceiptDropReason, RenewalResult, SessionResult,
    TaskKind, TraceContextSource, TransportLabel,
};
pub(crate) use metrics::OutcomeCounts;
pub use metrics::{Accounting, Metrics};
pub(crate) use propagation::{continue_trace, span_trace_context, TraceContext};
pub(crate) use redact::hashed_session_id;
pub use redact::{safe_method, safe_token};
pub use ring::LogRing;
pub(crate) use ring::{LogEvent, RingStats};
