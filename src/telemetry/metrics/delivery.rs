//! Downstream legs and response deliveries, the outcomes of truth: legs by transport and
//! outcome, deliveries by kind and final outcome, POST attempts by kind and result, and
//! terminal responses the control plane refused as too large, and the messages never
//! posted because they carry an unpaired surrogate escape.
//!
//! Every pair of label values has its series from startup (at zero); the outcome sets
//! are the ones upstairs owns (`L`).

use prometheus::{IntCounter, IntCounterVec, Registry};

use super::{all, at_zero, counter_vec, int_counter, Metrics};
use crate::telemetry::label::{
    AttemptResultLabel, DeliveryKind, DeliveryLabel, LabelSets, LabelValue, LegOutcomeLabel, TransportLabel,
};

/// Downstream legs and response deliveries: the outcomes of truth.
pub(super) struct DeliveryFamilies {
    pub(super) downstream_requests: IntCounterVec,
    pub(super) deliveries: IntCounterVec,
    delivery_attempts: IntCounterVec,
    responses_too_large: IntCounter,
    invalid_json_payloads: IntCounterVec,
}

impl DeliveryFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            downstream_requests: counter_vec(
                r,
                "downstream_requests_total",
                "Downstream legs by transport and outcome (abandoned: effect unknown).",
                &["transport", "outcome"],
            ),
            deliveries: counter_vec(
                r,
                "deliveries_total",
                "Response deliveries by kind and final outcome.",
                &["kind", "outcome"],
            ),
            delivery_attempts: counter_vec(
                r,
                "delivery_attempts_total",
                "Response POST attempts by kind and result.",
                &["kind", "result"],
            ),
            responses_too_large: int_counter(
                r,
                "responses_too_large_total",
                "Terminal responses the control plane refused as larger than it accepts (413 request_body_too_large); the caller of a JSON-RPC request is sent a small error instead.",
            ),
            invalid_json_payloads: counter_vec(
                r,
                "invalid_json_payloads_total",
                "MCP server messages carrying an unpaired surrogate escape, which the control plane refuses (400 invalid_json_payload), never posted: a terminal answer replaced by an error in words, a notification dropped; by kind.",
                &["kind"],
            ),
        }
    }

    /// Every transport and outcome, and every delivery kind with each final outcome and
    /// each attempt result of `L`, at zero.
    pub(super) fn series_at_zero<L: LabelSets>(&self) {
        let outcomes: Vec<_> = all::<L::LegOutcome>().collect();
        at_zero(&self.downstream_requests, all::<L::Transport>(), &outcomes);
        let deliveries: Vec<_> = all::<L::Delivery>().collect();
        at_zero(&self.deliveries, all::<DeliveryKind>(), &deliveries);
        let attempts: Vec<_> = all::<L::AttemptResult>().collect();
        at_zero(&self.delivery_attempts, all::<DeliveryKind>(), &attempts);
        at_zero(&self.invalid_json_payloads, all::<DeliveryKind>(), &[]);
    }
}

impl Metrics {
    pub(crate) fn downstream_finished(&self, transport: impl TransportLabel, outcome: impl LegOutcomeLabel) {
        self.delivery
            .downstream_requests
            .with_label_values(&[transport.as_label(), outcome.as_label()])
            .inc();
    }
    pub(crate) fn delivery_finished(&self, kind: DeliveryKind, outcome: impl DeliveryLabel) {
        self.delivery
            .deliveries
            .with_label_values(&[kind.as_label(), outcome.as_label()])
            .inc();
    }
    pub(crate) fn delivery_attempted(&self, kind: DeliveryKind, result: impl AttemptResultLabel) {
        self.delivery
            .delivery_attempts
            .with_label_values(&[kind.as_label(), result.as_label()])
            .inc();
    }
    /// The control plane refused a terminal response as too large.
    pub(crate) fn response_too_large(&self) {
        self.delivery.responses_too_large.inc();
    }
    /// An MCP server's message of `kind` carried an unpaired surrogate escape and was not posted.
    pub(crate) fn invalid_json_payload(&self, kind: DeliveryKind) {
        self.delivery
            .invalid_json_payloads
            .with_label_values(&[kind.as_label()])
            .inc();
    }
}
