//! W3C trace context (`traceparent`, `tracestate`): parsed from a caller, adopted as the
//! parent of a span, and read back from a span to hand on.
//!
//! The parser follows the W3C Trace Context rules: a `traceparent` that is not exactly
//! `version-traceid-parentid-flags` in lowercase hex (version not `ff`, ids not all
//! zeros; version `00` exactly 55 characters) is malformed and ignored; a `tracestate`
//! is only read beside a valid `traceparent`, and a malformed one is dropped alone. A
//! malformed value is never kept, logged or echoed: callers count it and go on.
//!
//! The span helpers work through `tracing-opentelemetry`; without span export (no
//! OpenTelemetry layer) they do nothing and read nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Longest `tracestate` accepted (the W3C limit a vendor must propagate).
const MAX_TRACESTATE: usize = 512;

/// A valid W3C trace context: the caller's, or a span's to hand on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    /// A valid `tracestate`, as written; `None` when absent or empty.
    state: Option<String>,
}

/// What one carrier held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extracted {
    /// The context to continue, when its `traceparent` is valid.
    pub context: Option<TraceContext>,
    /// A value was present and unusable (the `traceparent`, or the `tracestate` beside a
    /// valid one): counted, never fatal.
    pub malformed: bool,
}

impl TraceContext {
    /// Reads one carrier: for each field, `None` when absent, `Some(None)` when present but
    /// not text (which is malformed whatever it says).
    pub(crate) fn extract(traceparent: Option<Option<&str>>, tracestate: Option<Option<&str>>) -> Extracted {
        let Some(traceparent) = traceparent else {
            // W3C: no traceparent, no trace context; a lone tracestate is not read.
            return Extracted::default();
        };
        let Some((trace_id, span_id, flags)) = traceparent.and_then(parse_traceparent) else {
            return Extracted {
                context: None,
                malformed: true,
            };
        };
        let (state, malformed) = match tracestate {
            None => (None, false),
            Some(text) => match text.map(valid_tracestate) {
                Some(Some(state)) => (state, false),
                Some(None) | None => (None, true),
            },
        };
        Extracted {
            context: Some(TraceContext {
                trace_id,
                span_id,
                flags,
                state,
            }),
            malformed,
        }
    }

    /// The `traceparent` value (version `00`).
    pub(crate) fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", hex(&self.trace_id), hex(&self.span_id), self.flags)
    }

    /// The `tracestate` value, if there is one.
    pub(crate) fn tracestate(&self) -> Option<&str> {
        self.state.as_deref()
    }

    fn span_context(&self) -> SpanContext {
        let state = self
            .state
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        SpanContext::new(
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.span_id),
            TraceFlags::new(self.flags),
            true,
            state,
        )
    }
}

/// Makes `parent` (a remote caller's context) the parent of `span`. Must be called before
/// the span is first entered or given children; later calls, and calls without span
/// export, change nothing.
pub(crate) fn continue_trace(span: &tracing::Span, parent: &TraceContext) {
    let cx = opentelemetry::Context::new().with_remote_span_context(parent.span_context());
    // Without the OpenTelemetry layer there is no span to parent: nothing to do.
    let _ = span.set_parent(cx);
}

/// `span`'s own context, to hand on as the parent of what it calls: `None` without span
/// export. Starts the span if it has not started yet.
pub(crate) fn span_trace_context(span: &tracing::Span) -> Option<TraceContext> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    let state = sc.trace_state().header();
    Some(TraceContext {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
        state: (!state.is_empty()).then_some(state),
    })
}

/// `(trace id, parent id, flags)` of a valid `traceparent`.
fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let value = value.trim_matches([' ', '\t']);
    let b = value.as_bytes();
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let version = lower_hex::<1>(&b[0..2])?[0];
    // Version 00 is exactly 55 characters; a later version may append fields after a '-'.
    let shape_ok = match version {
        0xff => false,
        0x00 => b.len() == 55,
        _ => b.len() == 55 || b[55] == b'-',
    };
    let trace_id = lower_hex::<16>(&b[3..35])?;
    let span_id = lower_hex::<8>(&b[36..52])?;
    let flags = lower_hex::<1>(&b[53..55])?[0];
    let nonzero = trace_id.iter().any(|x| *x != 0) && span_id.iter().any(|x| *x != 0);
    (shape_ok && nonzero).then_some((trace_id, span_id, flags))
}

/// A `tracestate` that may be handed on: printable ASCII within the W3C size, whose
/// members parse. `Some(None)` for an empty one.
fn valid_tracestate(value: &str) -> Option<Option<String>> {
    let value = value.trim_matches([' ', '\t']);
    if value.len() > MAX_TRACESTATE || !value.bytes().all(|c| c == b'\t' || (0x20..=0x7e).contains(&c)) {
        return None;
    }
    value.parse::<TraceState>().ok()?;
    Some((!value.is_empty()).then(|| value.to_owned()))
}

/// `N` bytes from `2 * N` lowercase hex digits.
fn lower_hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
