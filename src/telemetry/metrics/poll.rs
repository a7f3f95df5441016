//! The long poll's families: `polls_total` by result, `poll_errors_total` by kind, the
//! time of the last successful poll, and the polls a stop could not wait for.
//!
//! Every result and every error kind has its series from startup (at zero).

use prometheus::{Gauge, IntCounter, IntCounterVec, Registry};

use super::{all, at_zero, counter_vec, gauge, int_counter, Metrics};
use crate::telemetry::label::{LabelSets, LabelValue, PollErrorLabel, PollResult};

/// `polls_total`, `poll_errors_total`, `last_successful_poll_timestamp_seconds`.
pub(super) struct PollFamilies {
    polls: IntCounterVec,
    poll_errors: IntCounterVec,
    last_successful_poll: Gauge,
    polls_abandoned: IntCounter,
}

impl PollFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            polls: counter_vec(r, "polls_total", "Control-plane polls by result.", &["result"]),
            poll_errors: counter_vec(r, "poll_errors_total", "Failed polls by kind.", &["kind"]),
            last_successful_poll: gauge(
                r,
                "last_successful_poll_timestamp_seconds",
                "Unix time of the last successful poll (0: none yet).",
            ),
            polls_abandoned: int_counter(
                r,
                "polls_abandoned_total",
                "Open polls a stop or a demotion could not wait for: dropped before their answer, any commands they were handed are unanswered.",
            ),
        }
    }

    /// Every result and every error kind of `L`, at zero.
    pub(super) fn series_at_zero<L: LabelSets>(&self) {
        at_zero(&self.polls, all::<PollResult>(), &[]);
        at_zero(&self.poll_errors, all::<L::PollErrorKind>(), &[]);
    }
}

impl Metrics {
    pub(crate) fn poll_finished(&self, result: PollResult) {
        self.poll.polls.with_label_values(&[result.as_label()]).inc();
    }
    pub(crate) fn poll_failed(&self, kind: impl PollErrorLabel) {
        self.poll.polls.with_label_values(&[PollResult::Error.as_label()]).inc();
        self.poll.poll_errors.with_label_values(&[kind.as_label()]).inc();
    }
    pub(crate) fn poll_succeeded_at(&self, unix_seconds: f64) {
        self.poll.last_successful_poll.set(unix_seconds);
    }
    /// An open poll was dropped, its answer not awaited, when polling stopped.
    pub(crate) fn poll_abandoned(&self) {
        self.poll.polls_abandoned.inc();
    }
}
