//! Optional OTLP/HTTP (protobuf) span export.
//!
//! Off unless `telemetry.otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` names a base URL
//! (`/v1/traces` is appended, as the standard variable does). Spans are batched on the
//! exporter's own thread with a bounded queue, so a collector that is down, slow or
//! black-holed never delays dispatch, delivery or the latch; at exit the flush is bounded
//! by [`FLUSH_BOUND`]. Only this crate's spans are exported, never the HTTP libraries'.
//!
//! The exporter's HTTP client is blocking: building it and flushing it happen on threads
//! of their own, never on an async worker, and async callers wait for them with `.await`.
//! A flush that outlives its bound is left to its thread, which dies with the process.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The longest exit may wait for spans to be flushed.
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(2);
/// One export request's bound.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter: {0}")]
pub(crate) struct OtlpError(String);

/// The traces URL from the configured base, else the standard variable's base.
pub(crate) fn traces_url(configured: Option<&str>, env_base: Option<&str>) -> Option<String> {
    let base = configured.or(env_base.filter(|e| !e.trim().is_empty()))?;
    Some(format!("{}/v1/traces", base.trim().trim_end_matches('/')))
}

/// Builds the provider on a thread of its own (the blocking HTTP client it creates must
/// not be built or dropped on an async worker); the caller awaits it without blocking.
pub(crate) async fn provider(traces_url: String) -> Result<SdkTracerProvider, OtlpError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tunnelgate-otlp-setup".to_owned())
        .spawn(move || {
            let _ = tx.send(build_provider(traces_url));
        })
        .map_err(|e| OtlpError(format!("cannot start the exporter's setup thread: {e}")))?;
    rx.await
        .map_err(|_| OtlpError("the exporter could not be built".to_owned()))?
}

fn build_provider(traces_url: String) -> Result<SdkTracerProvider, OtlpError> {
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
}

/// The tracer the `tracing` layer records into.
pub(crate) fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("tunnelgate")
}

/// Flushes and stops the provider on a thread of its own, waiting for it at most
/// [`FLUSH_BOUND`] without blocking the caller's worker.
///
/// # Cancel safety
/// Cancel-safe: the flush goes on in its thread; only the wait is dropped.
pub(crate) async fn shutdown(provider: SdkTracerProvider) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if spawn_shutdown(provider, move || {
        let _ = tx.send(());
    }) {
        let _ = tokio::time::timeout(FLUSH_BOUND, rx).await;
    }
}

/// Flushes and stops the provider on a thread of its own without waiting for it.
pub(crate) fn shutdown_detached(provider: SdkTracerProvider) {
    spawn_shutdown(provider, || {});
}

/// Runs `provider.shutdown()` then `done` on a new thread; `false` if none could start
/// (the provider handle is then dropped, which is cheap: the tracer keeps it alive).
fn spawn_shutdown(provider: SdkTracerProvider, done: impl FnOnce() + Send + 'static) -> bool {
    std::thread::Builder::new()
        .name("tunnelgate-otlp-flush".to_owned())
        .spawn(move || {
            let _ = provider.shutdown();
            done();
        })
        .is_ok()
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

    #[tokio::test(flavor = "current_thread")]
    async fn a_flush_to_a_black_hole_is_bounded_and_never_blocks_the_runtime() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::Arc;

        use opentelemetry::trace::Tracer as _;
        use tokio::time::Instant;

        // Connections land in the backlog and are never answered.
        let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", hole.local_addr().unwrap());
        let provider = provider(traces_url(Some(&base), None).unwrap()).await.unwrap();
        tracer(&provider).in_span("pending", |_| {});

        // One worker thread: a blocking wait would stop this ticker.
        let ticks = Arc::new(AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let started = Instant::now();
        shutdown(provider).await;
        let took = started.elapsed();
        ticker.abort();
        assert!(took < FLUSH_BOUND + Duration::from_millis(500), "{took:?}");
        let ticks = ticks.load(Ordering::Relaxed);
        assert!(
            u128::from(ticks) * 10 * 2 >= took.as_millis(),
            "the runtime stalled during the flush: {ticks} ticks in {took:?}"
        );
        drop(hole);
    }
}
