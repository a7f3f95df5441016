//! Log and trace setup: JSON or text to stderr, filtered by `telemetry.log_level`, and
//! optional OTLP span export (see [`super::otlp`]).
//!
//! Payloads, bodies, header values, keys and tokens are never passed to `tracing` by
//! this crate, so no level can reveal them. The HTTP and TLS libraries underneath log
//! peer addresses and connection details at debug level; they are capped at `warn`
//! unless the filter names them explicitly (an operator's deliberate choice).
//!
//! The level filter sits behind a reload handle ([`LogFilter`]): `tunnelgate run` swaps
//! it on SIGHUP without restarting the subscriber.
//!
//! The log ring ([`super::ring`]) is a second output under the very same filters: it
//! keeps what the log prints, never an event or a span field the log would not show.

use std::sync::Arc;

use tracing_subscriber::filter::{self, FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

use super::otlp;
use super::ring::LogRing;

/// The only span the log layer sees (see [`init`]).
const LOGGED_SPAN: &str = "tunnelgate.command";

/// The command span's fields, kept as the JSON object the JSON log line embeds as `span`.
///
/// `tracing_subscriber`'s own `JsonFields` re-parses the whole object and writes it out
/// again on every `Span::record`: a command records its outcome, delivery and error type
/// on its span, so that was most of what `info` cost per command even when no line was
/// logged (docs/PERFORMANCE.md). Here a record appends `"name":value` pairs; a field
/// recorded twice appears twice, and the JSON formatter, which parses this object once
/// per logged line, keeps the last value (as the merge did). Values are written as
/// `JsonFields` writes them: strings and `Debug` values as JSON strings, numbers and
/// booleans as such.
struct SpanJsonFields;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for SpanJsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut out = JsonPairs::default();
        fields.record(&mut out);
        writer.write_str("{")?;
        writer.write_str(&out.0)?;
        writer.write_str("}")
    }

    fn add_fields(
        &self,
        current: &'writer mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        let mut out = JsonPairs::default();
        fields.record(&mut out);
        if out.0.is_empty() {
            return Ok(());
        }
        match current.fields.strip_suffix('}') {
            Some(open) => {
                let separator = if open.ends_with('{') { "" } else { "," };
                let joined = format!("{open}{separator}{}}}", out.0);
                current.fields = joined;
            }
            None => current.fields = format!("{{{}}}", out.0),
        }
        Ok(())
    }
}

/// `"name":value` pairs, comma-separated, as [`SpanJsonFields`] writes them.
#[derive(Default)]
struct JsonPairs(String);

impl JsonPairs {
    /// Starts the pair of `field`; `false` for a field the log never shows (`log.*`).
    fn key(&mut self, field: &tracing::field::Field) -> bool {
        let name = field.name();
        if name.starts_with("log.") {
            return false;
        }
        if !self.0.is_empty() {
            self.0.push(',');
        }
        push_json_string(&mut self.0, name.strip_prefix("r#").unwrap_or(name));
        self.0.push(':');
        true
    }
}

/// `value` as a JSON string, as serde_json writes one: quotes and backslashes escaped, control
/// characters as their short escapes or `\u00XX`.
fn push_json_string(out: &mut String, value: &str) {
    use std::fmt::Write as _;
    out.reserve(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl tracing::field::Visit for JsonPairs {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if self.key(field) {
            push_json_string(&mut self.0, value);
        }
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        if self.key(field) {
            let _ = std::fmt::Write::write_fmt(&mut self.0, format_args!("{value}"));
        }
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if self.key(field) {
            let _ = std::fmt::Write::write_fmt(&mut self.0, format_args!("{value}"));
        }
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        if self.key(field) {
            self.0.push_str(if value { "true" } else { "false" });
        }
    }
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if self.key(field) {
            // As serde_json writes it: a number, or `null` when not finite.
            self.0.push_str(&serde_json::Value::from(value).to_string());
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.key(field) {
            push_json_string(&mut self.0, &format!("{value:?}"));
        }
    }
}

/// Output format of the structured log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Text,
}

/// Span export, if any: [`shutdown`](Self::shutdown) flushes it, bounded.
#[must_use = "await `shutdown()` at exit to flush exported spans"]
pub struct TelemetryGuard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    log_filter: LogFilter,
}

/// Replaces the level filter of the installed subscriber. Cheap to clone.
#[derive(Clone)]
pub struct LogFilter {
    swap: Arc<dyn Fn(EnvFilter) -> Result<(), reload::Error> + Send + Sync>,
}

/// Why the level filter could not be replaced (the one in force stays).
#[derive(Debug, thiserror::Error)]
pub enum LogFilterError {
    #[error("{filter:?} is not a log filter: {source}")]
    Invalid { filter: String, source: filter::ParseError },
    #[error("the log filter cannot be replaced: {0}")]
    Unavailable(#[source] reload::Error),
}

impl LogFilterError {
    /// Stable label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "invalid",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

impl LogFilter {
    fn new<S: 'static>(handle: reload::Handle<EnvFilter, S>) -> Self {
        LogFilter {
            swap: Arc::new(move |filter| handle.reload(filter)),
        }
    }

    /// Applies `level` (a `telemetry.log_level` value) as [`init`] did, the quiet
    /// libraries capped the same way. Callsites are re-evaluated at once.
    pub fn set(&self, level: &str) -> Result<(), LogFilterError> {
        let filter = EnvFilter::try_new(filter_directives(level)).map_err(|source| LogFilterError::Invalid {
            filter: level.to_owned(),
            source,
        })?;
        (self.swap)(filter).map_err(LogFilterError::Unavailable)
    }
}

impl TelemetryGuard {
    /// The handle that replaces the level filter (a no-op handle when [`init`] found a
    /// subscriber already installed: [`LogFilter::set`] then reports it unavailable).
    pub fn log_filter(&self) -> LogFilter {
        self.log_filter.clone()
    }

    /// Flushes and stops span export, waiting at most [`otlp::FLUSH_BOUND`] and never
    /// blocking the async worker it runs on.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            otlp::shutdown(provider).await;
        }
    }
}

impl Drop for TelemetryGuard {
    /// Without [`shutdown`](Self::shutdown) (an early return, a panic), export is still
    /// stopped on a thread of its own, but nobody waits for its flush.
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            otlp::shutdown_detached(provider);
        }
    }
}

/// Libraries whose debug output names MCP server and control-plane addresses.
const QUIET_LIBRARIES: [&str; 9] = [
    "hyper",
    "hyper_util",
    "reqwest",
    "h2",
    "rustls",
    "rustls_platform_verifier",
    "tower",
    "axum",
    "mio",
];

/// The effective filter: the configured one, with the libraries above capped at `warn`
/// unless it names them.
pub(crate) fn filter_directives(level: &str) -> String {
    let mut directives = level.trim().to_owned();
    for lib in QUIET_LIBRARIES {
        let named = level
            .split(',')
            .any(|d| d.trim().split(['=', '[', ':']).next() == Some(lib));
        if !named {
            directives.push_str(&format!(",{lib}=warn"));
        }
    }
    directives
}

/// Installs the global subscriber. A second call (tests, embedders) is a no-op (and
/// `ring` then stays empty).
///
/// `ring` receives every event the log prints (see `outputs`). `otlp_endpoint` is the configured base URL; `OTEL_EXPORTER_OTLP_ENDPOINT` is used
/// when it is `None`. An exporter that cannot be built is reported once on stderr and
/// the gateway runs without it. The exporter is built on a thread of its own (awaited).
pub async fn init(format: Format, level: &str, otlp_endpoint: Option<&str>, ring: &Arc<LogRing>) -> TelemetryGuard {
    let filter = EnvFilter::try_new(filter_directives(level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let log_layer = printed_log(format);
    let provider = span_provider(otlp_endpoint).await;
    let span_layer = provider.as_ref().map(|p| {
        let ours = Targets::new().with_target("tunnelgate", tracing::Level::DEBUG);
        tracing_opentelemetry::layer()
            .with_tracer(otlp::tracer(p))
            // Spans carry what docs/telemetry.md lists, nothing of the bridge's own:
            // no busy/idle times, thread, source location or target attributes.
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            // Spans only: log lines stay log lines (span events are added explicitly, see
            // `telemetry::events`), so a warning never turns a span's status or leaks a
            // log field into a trace.
            .with_filter(filter::filter_fn(move |meta| {
                meta.is_span() && ours.would_enable(meta.target(), meta.level())
            }))
    });
    // The log sees one span per command, the command's own (request id, channel, method):
    // every line logged for a command carries those, whichever inner span it came from.
    // The inner spans are for traces; formatting their fields for the log at each start
    // and record is a cost per command (measured in docs/PERFORMANCE.md).
    let log_spans = log_spans();
    let log_layer = outputs(log_layer, ring);
    // The filter is reloadable in both shapes (SIGHUP): the handle's type names the
    // subscriber under it, so each shape makes its own.
    let (result, log_filter) = match span_layer {
        // Without export the level filter is global: a span or event it rules out is never
        // created at all (as a per-layer filter it still was, a cost per command at
        // `warn`; docs/PERFORMANCE.md).
        None => {
            let (filter, handle) = reload::Layer::new(filter);
            let result = tracing_subscriber::registry()
                .with(log_layer.with_filter(log_spans))
                .with(filter)
                .try_init();
            (result, LogFilter::new(handle))
        }
        Some(span_layer) => {
            let (filter, handle) = reload::Layer::new(filter);
            let result = tracing_subscriber::registry()
                .with(log_layer.with_filter(filter.and(log_spans)))
                .with(span_layer)
                .try_init();
            (result, LogFilter::new(handle))
        }
    };
    drop(result);
    TelemetryGuard { provider, log_filter }
}

/// The log printed on stderr, as JSON lines or text.
fn printed_log(format: Format) -> Box<dyn Layer<Registry> + Send + Sync> {
    match format {
        Format::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .fmt_fields(SpanJsonFields)
            .with_writer(std::io::stderr)
            .boxed(),
        Format::Text => tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
    }
}

/// The span exporter's provider for `otlp_endpoint` (else `OTEL_EXPORTER_OTLP_ENDPOINT`),
/// or none: not configured, or not buildable (said once on stderr).
async fn span_provider(otlp_endpoint: Option<&str>) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    let env_base = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok();
    let url = otlp::traces_url(otlp_endpoint, env_base.as_deref())?;
    match otlp::provider(url).await {
        Ok(p) => Some(p),
        Err(e) => {
            // Never a panic on a closed stderr (telemetry imports nothing upward).
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "tunnelgate: span export disabled: {e}");
            None
        }
    }
}

/// The printed log and the ring, one layer: whatever filter wraps it filters both alike.
pub(crate) fn outputs<S>(log_layer: impl Layer<S>, ring: &Arc<LogRing>) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    log_layer.and_then(ring.layer())
}

/// Events, and of spans only the command's own ([`LOGGED_SPAN`]).
pub(super) fn log_spans() -> filter::FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    filter::filter_fn(|meta| !meta.is_span() || meta.name() == LOGGED_SPAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::attrs;

    #[test]
    fn libraries_are_capped_unless_named() {
        let d = filter_directives("debug");
        assert!(d.starts_with("debug,") && d.contains("hyper_util=warn") && d.contains("reqwest=warn"));
        let d = filter_directives("info,reqwest=debug");
        assert!(d.contains("reqwest=debug") && !d.contains("reqwest=warn"));
        assert!(EnvFilter::try_new(filter_directives("tunnelgate=trace")).is_ok());
    }

    #[test]
    fn a_filter_whose_subscriber_is_gone_reports_it_and_a_bad_one_is_refused() {
        let (layer, handle) = reload::Layer::<EnvFilter, Registry>::new(EnvFilter::new("info"));
        let filter = LogFilter::new(handle);
        assert!(filter.set("debug").is_ok(), "the layer is alive");
        assert_eq!(filter.set("tunnelgate=loud").unwrap_err().kind(), "invalid");
        drop(layer);
        assert_eq!(filter.set("debug").unwrap_err().kind(), "unavailable");
    }

    #[test]
    fn a_json_string_is_written_as_serde_json_writes_it() {
        for value in [
            "plain",
            "q\"uote",
            "back\\slash",
            "line\nbreak\r\t",
            "\u{0}\u{1f}\u{8}\u{c}",
            "é ✓ 𝄞",
            "",
        ] {
            let mut out = String::new();
            push_json_string(&mut out, value);
            assert_eq!(out, serde_json::to_string(value).unwrap(), "{value:?}");
        }
    }

    /// A writer into a shared buffer, for reading the lines the JSON layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_json_line_shows_the_span_fields_set_at_creation_and_the_last_value_of_each_recorded_one() {
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .fmt_fields(SpanJsonFields)
            .with_writer(move || writer.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "tunnelgate.command",
                { attrs::REQUEST_ID } = "r\"1",
                { attrs::STRICT } = false,
                { attrs::LEG_OUTCOME } = tracing::field::Empty,
                { attrs::ERROR_TYPE } = tracing::field::Empty,
                attempts = tracing::field::Empty,
            );
            span.record(attrs::LEG_OUTCOME, "answered");
            span.record(attrs::ERROR_TYPE, "first");
            span.record(attrs::ERROR_TYPE, "second");
            span.record("attempts", 3_i64);
            let empty = tracing::info_span!("tunnelgate.command", attempts = tracing::field::Empty);
            empty.record("attempts", 1_u64);
            span.in_scope(|| tracing::info!(n = 1, "inside"));
            empty.in_scope(|| tracing::info!(debugged = ?Some(2), "inside the empty one"));
        });
        let text = String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("utf-8");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        let span = &lines[0]["span"];
        assert_eq!(span["tunnelgate.request_id"], "r\"1", "{text}");
        assert_eq!(span["tunnelgate.strict"], false, "{text}");
        assert_eq!(span["tunnelgate.leg_outcome"], "answered", "{text}");
        assert_eq!(span["error.type"], "second", "the last recorded value: {text}");
        assert_eq!(span["attempts"], 3, "{text}");
        assert_eq!(span["name"], "tunnelgate.command", "{text}");
        assert_eq!(lines[0]["fields"]["message"], "inside", "{text}");
        assert_eq!(
            lines[1]["span"]["attempts"], 1,
            "a field recorded on a span created with none set: {text}"
        );
        assert_eq!(lines[1]["fields"]["debugged"], "Some(2)", "{text}");
    }
}
