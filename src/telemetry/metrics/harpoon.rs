//! Channel `harpoon`: its calls by target label and outcome, the targets it holds, the
//! targets registered from discovery, and the calls and lookups it refused.
//!
//! The outcome, status class, registration result and refusal reason are closed sets
//! (below), each created at zero; `label` takes only registered target labels (bounded
//! by the registry's limit) and `__unknown__`.

use prometheus::{IntCounterVec, IntGauge, Registry};

use super::{counter_vec, int_gauge, Metrics};

/// `outcome` of `harpoon_calls_total` (upstream's set).
pub(super) const HARPOON_CALL_OUTCOMES: [&str; 5] = [
    "success",
    "invalid_input",
    "request_error",
    "response_read_error",
    "response_too_large",
];
/// `status_class` of `harpoon_calls_total`.
pub(super) const HARPOON_STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];
/// `result` of `harpoon_registrations_total`.
pub(super) const HARPOON_REGISTRATION_RESULTS: [&str; 5] = ["added", "replaced", "unchanged", "skipped", "refused"];
/// `reason` of `harpoon_refusals_total`.
pub(super) const HARPOON_REFUSAL_REASONS: [&str; 9] = [
    "unknown_target",
    "request_too_large",
    "response_too_large",
    "redirect_blocked",
    "redirect_limit",
    "not_a_token_endpoint",
    "audience_unusable",
    "invalid_template_arguments",
    "template_requires_template_tool",
];

pub(super) struct HarpoonFamilies {
    calls: IntCounterVec,
    targets: IntGauge,
    registrations: IntCounterVec,
    refusals: IntCounterVec,
}

impl HarpoonFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            calls: counter_vec(
                r,
                "harpoon_calls_total",
                "call_target and call_target_template calls on channel harpoon that passed the argument check, by target label, outcome and the target's status class.",
                &["label", "outcome", "status_class"],
            ),
            targets: int_gauge(r, "harpoon_targets", "Targets channel harpoon holds (configured and registered); the channel is routable while above 0."),
            registrations: counter_vec(
                r,
                "harpoon_registrations_total",
                "Records of oauth_discovery bundles offered to channel harpoon, by what registering them did.",
                &["result"],
            ),
            refusals: counter_vec(
                r,
                "harpoon_refusals_total",
                "Calls and lookups channel harpoon refused without reaching a target (or after a target's answer: a blocked redirect, a body over the limit), by reason.",
                &["reason"],
            ),
        }
    }

    pub(super) fn series_at_zero(&self) {
        for r in HARPOON_REGISTRATION_RESULTS {
            self.registrations.with_label_values(&[r]);
        }
        for r in HARPOON_REFUSAL_REASONS {
            self.refusals.with_label_values(&[r]);
        }
        for o in HARPOON_CALL_OUTCOMES {
            self.calls.with_label_values(&["__unknown__", o, "none"]);
        }
    }
}

impl Metrics {
    pub fn harpoon_targets(&self, n: usize) {
        self.harpoon.targets.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn harpoon_call(&self, label: &str, outcome: &'static str, status_class: &'static str) {
        debug_assert!(HARPOON_CALL_OUTCOMES.contains(&outcome) && HARPOON_STATUS_CLASSES.contains(&status_class));
        self.harpoon
            .calls
            .with_label_values(&[label, outcome, status_class])
            .inc();
    }

    pub fn harpoon_registration(&self, result: &'static str) {
        debug_assert!(HARPOON_REGISTRATION_RESULTS.contains(&result));
        self.harpoon.registrations.with_label_values(&[result]).inc();
    }

    pub fn harpoon_refused(&self, reason: &'static str) {
        debug_assert!(HARPOON_REFUSAL_REASONS.contains(&reason), "{reason}");
        self.harpoon.refusals.with_label_values(&[reason]).inc();
    }
}
