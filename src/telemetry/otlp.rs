//! Optional OTLP/HTTP (protobuf) span export.
//!
//! Off unless `telemetry.otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` names a base URL
//! (`/v1/traces` is appended, as the standard variable does). Spans are batched on the
//! exporter's own thread with a bounded queue, so a collector that is down, slow or
//! black-holed never delays dispatch, delivery or the latch; at exit the flush is bounded
//! by [`FLUSH_BOUND`]. Only this crate's spans are exported, never the HTTP libraries'.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The longest exit may wait for spans to be flushed.
pub const FLUSH_BOUND: Duration = Duration::from_secs(2);
/// One export request's bound.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter: {0}")]
pub struct OtlpError(String);

impl OtlpError {
    pub fn kind(&self) -> &'static str {
        "otlp"
    }
}

/// The traces URL from the configured base, else the standard variable's base.
pub fn traces_url(configured: Option<&str>, env_base: Option<&str>) -> Option<String> {
    let base = configured.or(env_base.filter(|e| !e.trim().is_empty()))?;
    Some(format!("{}/v1/traces", base.trim().trim_end_matches('/')))
}

/// Builds the provider on a thread of its own: the blocking HTTP client it creates must
/// not be built or dropped inside the async runtime.
pub fn provider(traces_url: String) -> Result<SdkTracerProvider, OtlpError> {
    std::thread::spawn(move || {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(traces_url)
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(Default::default())
            .build()
            .map_err(|e| OtlpError(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("tunnelgate");
        }
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build())
    })
    .join()
    .map_err(|_| OtlpError("the exporter could not be built".to_owned()))?
}

/// The tracer the `tracing` layer records into.
pub fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("tunnelgate")
}

/// Flushes and stops the provider off the async runtime, waiting at most [`FLUSH_BOUND`].
pub fn shutdown(provider: SdkTracerProvider) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = provider.shutdown();
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(FLUSH_BOUND);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_base_wins_and_v1_traces_is_appended() {
        assert_eq!(
            traces_url(Some("http://a:4318"), Some("http://b:4318")).as_deref(),
            Some("http://a:4318/v1/traces")
        );
        assert_eq!(
            traces_url(None, Some("http://b:4318/")).as_deref(),
            Some("http://b:4318/v1/traces")
        );
        assert_eq!(traces_url(None, Some("  ")), None);
        assert_eq!(traces_url(None, None), None);
    }
}
