//! The local operator listener: `/livez`, `/healthz`, `/readyz`, `/status`, `/metrics`,
//! `/events` (the log ring, [`events`]), the official client's `/health` and
//! `/health/{component}` ([`health_api`]), and the operator page `/ui` ([`ui`]: its
//! access rules and headers).
//!
//! Read-only: it observes the fence, the health counters, the channels and the metrics,
//! and never changes any of them. Loopback by default; a non-loopback address needs
//! `ops.allow_remote = true` (checked by the configuration). Its connections are bounded
//! ([`listener`]): a flood of them cannot take the command path's descriptors.

mod events;
mod health_api;
mod listener;
mod status;
pub(crate) mod ui;

pub use status::GatewayState;
pub(crate) use status::{Mode, OpsState, StatusDocument};

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::supervisor::TaskEnd;

pub(crate) fn router(state: Arc<OpsState>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/events", get(events::events))
        .route("/health", any(health_api::aggregate))
        .route("/health/{component}", any(health_api::one))
        .merge(ui::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), ui::guard))
        .with_state(state)
}

/// Binds the listener (errors name the address) and serves until `stop`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until `stop`, within the listener's bounds; ending any other way is unexpected
/// (its supervisor reports it).
pub(crate) async fn serve(listener: tokio::net::TcpListener, state: Arc<OpsState>, stop: CancellationToken) -> TaskEnd {
    let stopped = stop.clone();
    let result = listener::serve(listener, router(state), stop).await;
    match result {
        Ok(()) if stopped.is_cancelled() => TaskEnd::Finished,
        Ok(()) => TaskEnd::Unexpected("the ops listener stopped"),
        Err(e) => {
            tracing::warn!(error = %e, "ops listener stopped with an error");
            TaskEnd::Unexpected("the ops listener failed")
        }
    }
}

async fn livez() -> &'static str {
    "ok\n"
}

/// The official client's liveness probe, byte for byte: `live`, no newline.
async fn healthz() -> &'static str {
    "live"
}

async fn readyz(State(s): State<Arc<OpsState>>) -> Response {
    match s.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")).into_response(),
    }
}

async fn status(State(s): State<Arc<OpsState>>) -> Response {
    axum::Json(s.status()).into_response()
}

async fn metrics(State(s): State<Arc<OpsState>>) -> Response {
    s.metrics.set_readiness(s.readiness().is_ok());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        s.metrics.render(),
    )
        .into_response()
}
