//! Span events: the moments inside a command that its span records (the table in
//! `docs/telemetry.md` lists each with its attributes).
//!
//! Each goes to the current span, through `tracing-opentelemetry`; without span export
//! they do nothing. Log lines are not span events: the exporting layer takes spans only,
//! so a span carries exactly what this module and the span fields put there.

use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::attrs;

/// A JSON-RPC notification from the MCP server was posted to the control plane
/// (`method` already made safe; `delivery` is the delivery's outcome label).
pub(crate) fn notification_forwarded(method: Option<String>, delivery: &'static str) {
    let mut attributes = vec![KeyValue::new(attrs::DELIVERY_OUTCOME, delivery)];
    if let Some(method) = method {
        attributes.push(KeyValue::new(attrs::MCP_METHOD_NAME, method));
    }
    tracing::Span::current().add_event(attrs::NOTIFICATION_EVENT, attributes);
}

/// The fatal latch stopped this command (`category` and `exit_code` of the latch's cause).
pub(crate) fn fatal_latched(category: &'static str, exit_code: u8) {
    tracing::Span::current().add_event(
        attrs::LATCH_EVENT,
        vec![
            KeyValue::new(attrs::FATAL_CATEGORY, category),
            KeyValue::new(attrs::FATAL_EXIT_CODE, i64::from(exit_code)),
        ],
    );
}
