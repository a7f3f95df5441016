//! Channel `harpoon`: its calls by target label and outcome, the targets it holds, the
//! targets registered from discovery, and the calls and lookups it refused.
//!
//! The outcome, status class, registration result and refusal reason are closed sets
//! (the label enums below), each created at zero; `label` takes only registered target
//! labels (bounded by the registry's limit) and [`HARPOON_UNKNOWN_LABEL`].

use prometheus::{IntCounterVec, IntGauge, Registry};

use super::{all, at_zero, counter_vec, int_gauge, Metrics};
use crate::telemetry::label::LabelValue;
use crate::telemetry::label_enum;

/// `label` of `harpoon_calls_total` for a call whose label names no target.
pub(crate) const HARPOON_UNKNOWN_LABEL: &str = "__unknown__";

label_enum! {
    /// `outcome` of `harpoon_calls_total` (upstream's set).
    pub(crate) enum HarpoonCallOutcome {
        /// The target answered (any status).
        Success => "success",
        /// Refused before sending: the arguments, an unknown label, a body over the limit.
        InvalidInput => "invalid_input",
        /// The request failed or was refused on its way (connect, timeout, redirect).
        RequestError => "request_error",
        /// The answer's body could not be read.
        ResponseReadError => "response_read_error",
        /// The answer's body was over the limit.
        ResponseTooLarge => "response_too_large",
    }
}

label_enum! {
    /// `status_class` of `harpoon_calls_total`: the target's status by its hundreds, or
    /// `none` when there was no answer.
    pub(crate) enum HarpoonStatusClass {
        Informational => "1xx",
        Successful => "2xx",
        Redirection => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
        /// Every outcome but `success`: no status is counted, even when one arrived (a
        /// body unread or over the limit).
        NoStatus => "none",
    }
}

label_enum! {
    /// `result` of `harpoon_registrations_total`: what registering one discovered record did.
    pub(crate) enum HarpoonRegistrationResult {
        Added => "added",
        Replaced => "replaced",
        Unchanged => "unchanged",
        /// Not allowed by the registration rules.
        Skipped => "skipped",
        /// Allowed, and refused by the registry: its URL, or the registry is full.
        Refused => "refused",
    }
}

label_enum! {
    /// `reason` of `harpoon_refusals_total`.
    pub(crate) enum HarpoonRefusalReason {
        UnknownTarget => "unknown_target",
        RequestTooLarge => "request_too_large",
        ResponseTooLarge => "response_too_large",
        RedirectBlocked => "redirect_blocked",
        RedirectLimit => "redirect_limit",
        NotATokenEndpoint => "not_a_token_endpoint",
        AudienceUnusable => "audience_unusable",
        /// A `call_target_template` refused before sending: its arguments, parameters,
        /// headers or limits.
        InvalidTemplateArguments => "invalid_template_arguments",
        /// `call_target` on a template's label.
        TemplateRequiresTemplateTool => "template_requires_template_tool",
    }
}

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

    /// Every registration result and refusal reason, and every call outcome of the
    /// unknown label with no status, at zero.
    pub(super) fn series_at_zero(&self) {
        at_zero(&self.registrations, all::<HarpoonRegistrationResult>(), &[]);
        at_zero(&self.refusals, all::<HarpoonRefusalReason>(), &[]);
        for outcome in HarpoonCallOutcome::ALL {
            self.calls.with_label_values(&[
                HARPOON_UNKNOWN_LABEL,
                outcome.as_label(),
                HarpoonStatusClass::NoStatus.as_label(),
            ]);
        }
    }
}

impl Metrics {
    pub(crate) fn harpoon_targets(&self, n: usize) {
        self.harpoon.targets.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A call on the target `label` (or [`HARPOON_UNKNOWN_LABEL`]) ended with `outcome`.
    pub(crate) fn harpoon_call(&self, label: &str, outcome: HarpoonCallOutcome, status_class: HarpoonStatusClass) {
        self.harpoon
            .calls
            .with_label_values(&[label, outcome.as_label(), status_class.as_label()])
            .inc();
    }

    pub(crate) fn harpoon_registration(&self, result: HarpoonRegistrationResult) {
        self.harpoon.registrations.with_label_values(&[result.as_label()]).inc();
    }

    pub(crate) fn harpoon_refused(&self, reason: HarpoonRefusalReason) {
        self.harpoon.refusals.with_label_values(&[reason.as_label()]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::labels;

    #[test]
    fn harpoon_label_values_are_the_documented_ones() {
        assert_eq!(
            labels::<HarpoonCallOutcome>(),
            [
                "success",
                "invalid_input",
                "request_error",
                "response_read_error",
                "response_too_large"
            ]
        );
        assert_eq!(
            labels::<HarpoonStatusClass>(),
            ["1xx", "2xx", "3xx", "4xx", "5xx", "none"]
        );
        assert_eq!(
            labels::<HarpoonRegistrationResult>(),
            ["added", "replaced", "unchanged", "skipped", "refused"]
        );
        assert_eq!(
            labels::<HarpoonRefusalReason>(),
            [
                "unknown_target",
                "request_too_large",
                "response_too_large",
                "redirect_blocked",
                "redirect_limit",
                "not_a_token_endpoint",
                "audience_unusable",
                "invalid_template_arguments",
                "template_requires_template_tool"
            ]
        );
    }
}
