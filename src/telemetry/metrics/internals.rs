//! The gateway's own health: tasks that ended unexpectedly, by task, and malformed W3C
//! trace context in commands, by where it was found.
//!
//! Every task kind and trace-context source has its series from startup (at zero).

use prometheus::{IntCounterVec, Registry};

use super::{all, at_zero, counter_vec, Metrics};
use crate::telemetry::label::{LabelValue, TaskKind, TraceContextSource};

/// The gateway's own health: failed tasks, malformed trace context.
pub(super) struct InternalFamilies {
    task_failures: IntCounterVec,
    trace_context_invalid: IntCounterVec,
}

impl InternalFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            task_failures: counter_vec(
                r,
                "task_failures_total",
                "Gateway tasks that ended unexpectedly (panic or error), by task.",
                &["task"],
            ),
            trace_context_invalid: counter_vec(
                r,
                "trace_context_invalid_total",
                "Malformed W3C trace context in commands (ignored), by where it was found.",
                &["source"],
            ),
        }
    }

    /// Every task kind and trace-context source, at zero.
    pub(super) fn series_at_zero(&self) {
        at_zero(&self.task_failures, all::<TaskKind>(), &[]);
        at_zero(&self.trace_context_invalid, all::<TraceContextSource>(), &[]);
    }
}

impl Metrics {
    /// A gateway task ended unexpectedly (a panic, or an error it could not handle).
    pub(crate) fn task_failed(&self, task: TaskKind) {
        self.internals.task_failures.with_label_values(&[task.as_label()]).inc();
    }

    /// A command carried a trace context that is not valid W3C: ignored, counted here.
    pub(crate) fn trace_context_invalid(&self, source: TraceContextSource) {
        self.internals
            .trace_context_invalid
            .with_label_values(&[source.as_label()])
            .inc();
    }
}
