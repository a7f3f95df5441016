//! Span events: the moments inside a command that its span records (the table in
//! `docs/telemetry.md` lists each with its attributes).
//!
//! Each goes to the current span, through `tracing-opentelemetry`; without span export
//! they do nothing. Log lines are not span events: the exporting layer takes spans only,
//! so a span carries exactly what this module and the span fields put there.

use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A JSON-RPC notification from the MCP server was posted to the control plane
/// (`method` already made safe; `delivery` is the delivery's outcome label).
pub fn notification_forwarded(method: Option<String>, delivery: &'static str) {
    let mut attributes = vec![KeyValue::new("tunnelgate.delivery_outcome", delivery)];
    if let Some(method) = method {
        attributes.push(KeyValue::new("mcp.method.name", method));
    }
    tracing::Span::current().add_event("tunnelgate.notification", attributes);
}

/// The fatal latch stopped this command (`category` and `exit_code` of the latch's cause).
pub fn fatal_latched(category: &'static str, exit_code: u8) {
    tracing::Span::current().add_event(
        "tunnelgate.latch",
        vec![
            KeyValue::new("tunnelgate.fatal.category", category),
            KeyValue::new("tunnelgate.fatal.exit_code", i64::from(exit_code)),
        ],
    );
}
