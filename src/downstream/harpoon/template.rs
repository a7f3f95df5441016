//! `call_target_template`: one `GET` of a configured template target, rendered from the
//! caller's parameters (upstream's target templates, `docs/private-oauth.md`).
//!
//! Rooms: [`args`] (the arguments and every refusal), [`schema`] (what `tools/list`
//! and `list_targets` show of templates).
//!
//! Invariants:
//! - a refused call sends nothing: every argument, parameter, header and limit is
//!   checked before the fence is asked, and the refusal is an in-gateway answer;
//! - the URL dialled is the template's render, checked again right before sending
//!   (same origin, no userinfo, equal to a fresh render);
//! - no redirect is followed: a 3xx is the result, as every other status is;
//! - the outbound request goes through the fence as `call_target`'s does, so a strict
//!   gateway holds it the same way;
//! - logs name the label, the outcome, the status and the latency; never a parameter,
//!   a header value or the path.

pub(crate) mod args;
pub(crate) mod schema;

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::call::{self, CallArgs, CallFailure};
use super::registry::Target;
use super::HarpoonTransport;
use crate::downstream::watch::Release;
use crate::downstream::{LegFailure, LegOutcome};
use crate::strict::Admission;
use crate::telemetry::metrics::{HarpoonCallOutcome, HarpoonRefusalReason, HarpoonStatusClass, HARPOON_UNKNOWN_LABEL};

/// What `call_target_template` produced, as the server's answer takes it.
pub(crate) struct TemplateAnswer {
    pub(crate) result: Value,
    pub(crate) outcome: LegOutcome,
    pub(crate) failure: Option<LegFailure>,
}

impl TemplateAnswer {
    fn local(result: Value) -> Self {
        Self {
            result,
            outcome: LegOutcome::Answered,
            failure: None,
        }
    }
}

/// Runs one call: `raw` is the call's `arguments` as they arrived.
pub(crate) async fn call_template(
    harpoon: &HarpoonTransport,
    admission: &Admission,
    raw: Option<&str>,
    deadline: Option<Instant>,
) -> TemplateAnswer {
    let settings = &harpoon.inner.settings;
    let user_agent = format!("tunnelgate/{}", settings.version);
    // A refusal names a template's label only once its label is a template's (the
    // metric's label set stays bounded); counted by why it was refused.
    let refused = |refusal: args::Refusal, reason: HarpoonRefusalReason| {
        let metrics = &harpoon.inner.metrics;
        metrics.harpoon_call(
            refusal.label.as_deref().unwrap_or(HARPOON_UNKNOWN_LABEL),
            HarpoonCallOutcome::InvalidInput,
            HarpoonStatusClass::NoStatus,
        );
        metrics.harpoon_refused(reason);
        TemplateAnswer::local(super::answer::tool_error(
            refusal.label.as_deref().unwrap_or_default(),
            &refusal.message,
        ))
    };
    let arguments = match args::parse(raw) {
        Ok(a) => a,
        Err(refusal) => return refused(refusal, HarpoonRefusalReason::InvalidTemplateArguments),
    };
    let label = arguments.get("label").and_then(Value::as_str).unwrap_or_default();
    let Some(index) = settings.templates.iter().position(|t| t.label == label) else {
        let refusal = args::Refusal {
            label: None,
            message: "unknown template target".into(),
        };
        return refused(refusal, HarpoonRefusalReason::UnknownTarget);
    };
    let template = &settings.templates[index];
    let checked = match args::check(index, template, &arguments, settings.max_response_bytes, &user_agent) {
        Ok(c) => c,
        Err(refusal) => return refused(refusal, HarpoonRefusalReason::InvalidTemplateArguments),
    };
    send(harpoon, admission, checked, deadline, &user_agent).await
}

async fn send(
    harpoon: &HarpoonTransport,
    admission: &Admission,
    checked: args::Checked,
    deadline: Option<Instant>,
    user_agent: &str,
) -> TemplateAnswer {
    let template = &harpoon.inner.settings.templates[checked.index];
    let label = template.label.as_str();
    if !rechecked(&checked.url, &template.origin) {
        harpoon
            .inner
            .metrics
            .harpoon_call(label, HarpoonCallOutcome::RequestError, HarpoonStatusClass::NoStatus);
        return TemplateAnswer::local(super::answer::tool_error(label, "template request failed"));
    }
    let Ok(release) = Release::take(&harpoon.inner.connects, admission) else {
        return TemplateAnswer {
            result: super::answer::tool_error(label, "not sent: the gateway is stopping or latched; safe to retry"),
            outcome: LegOutcome::NotSent,
            failure: Some(LegFailure::NotAdmitted),
        };
    };
    let mut timeout = checked.timeout;
    if let Some(deadline) = deadline {
        timeout = timeout.min(deadline.saturating_duration_since(Instant::now()));
    }
    let target = Target {
        label: label.to_owned(),
        url: checked.url.clone(),
        original: checked.url,
        description: String::new(),
        category: "config".into(),
        tags: Vec::new(),
        key: None,
    };
    let call_args = CallArgs {
        method: Method::GET,
        headers: checked.headers,
        body: Bytes::new(),
        timeout,
        max_bytes: usize::try_from(checked.max_bytes).unwrap_or(usize::MAX),
        follow_redirects: false,
        max_redirects: 0,
    };
    let started = Instant::now();
    let inner = &harpoon.inner;
    let result = call::call(
        &inner.client,
        &inner.registry,
        &target,
        call_args,
        user_agent,
        true,
        release,
    )
    .await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(answered) => {
            let status = answered.status.as_u16();
            inner
                .metrics
                .harpoon_call(label, HarpoonCallOutcome::Success, super::answer::status_class(status));
            tracing::info!(component = "harpoon", label = %label, outcome = "success", status_code = status, latency_ms, "harpoon template request completed");
            TemplateAnswer::local(super::answer::success(result_of(answered)))
        }
        Err(failure) => failed(harpoon, label, &failure, latency_ms),
    }
}

/// The URL about to be dialled parses to itself, on the template's origin, with no
/// userinfo or fragment.
fn rechecked(url: &str, origin: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| {
        u.as_str() == url
            && u.username().is_empty()
            && u.password().is_none()
            && u.fragment().is_none()
            && u.origin().ascii_serialization() == *origin
    })
}

fn failed(harpoon: &HarpoonTransport, label: &str, failure: &CallFailure, latency_ms: u64) -> TemplateAnswer {
    let metrics = &harpoon.inner.metrics;
    metrics.harpoon_call(label, failure.metric_outcome(), HarpoonStatusClass::NoStatus);
    let words = match failure {
        CallFailure::ResponseReadFailed => "response read failed".to_owned(),
        CallFailure::ResponseTooLarge => {
            metrics.harpoon_refused(HarpoonRefusalReason::ResponseTooLarge);
            "response exceeds size limit".to_owned()
        }
        other => format!("template request failed: {}", other.message()),
    };
    tracing::warn!(component = "harpoon", label = %label, outcome = failure.kind(), latency_ms, "harpoon template request completed");
    let (outcome, leg_failure) = super::answer::outcome_of(failure);
    TemplateAnswer {
        result: super::answer::tool_error(label, &words),
        outcome,
        failure: leg_failure,
    }
}

/// `{status_code, headers?, body_base64?, body_size_bytes}`: nothing rewritten, no
/// `truncated` (a body over the limit is an error, never a part).
fn result_of(answered: call::Answered) -> Value {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &answered.headers {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(crate::config::canonical_header(name.as_str()))
            .or_default()
            .push(text);
    }
    let mut result = json!({"status_code": answered.status.as_u16()});
    if !headers.is_empty() {
        result["headers"] = json!(headers);
    }
    if !answered.body.is_empty() {
        result["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&answered.body));
    }
    result["body_size_bytes"] = json!(answered.body.len());
    result
}

#[cfg(test)]
mod tests;
