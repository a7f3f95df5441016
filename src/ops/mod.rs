//! The local operator listener: `/livez`, `/healthz`, `/readyz`, `/status`, `/metrics`.
//!
//! Read-only: it observes the fence, the health counters, the channels and the metrics,
//! and never changes any of them. Loopback by default; a non-loopback address needs
//! `ops.allow_remote = true` (checked by the configuration).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::dispatch::{Health, PollHealth};
use crate::downstream::{ChannelStatus, Channels};
use crate::strict::{Fatal, Fence, FenceSnapshot};
use crate::supervisor::TaskEnd;
use crate::telemetry::Metrics;

/// What the listener observes.
pub struct OpsState {
    pub fence: Fence,
    pub health: Arc<Health>,
    pub channels: Channels,
    pub metrics: Arc<Metrics>,
    /// A poll older than this makes the gateway not ready.
    pub poll_freshness: Duration,
}

/// `/status` document (schema_version 1; keys are API).
#[derive(Serialize)]
pub struct StatusDocument {
    pub schema_version: u32,
    pub version: &'static str,
    pub mode: &'static str,
    pub state: &'static str,
    pub ready: bool,
    pub fence: FenceSnapshot,
    pub fatal: Option<Fatal>,
    pub control_plane: PollHealth,
    pub downstream: Vec<ChannelStatus>,
    pub commands: Commands,
}

#[derive(Serialize)]
pub struct Commands {
    pub in_flight: usize,
    pub queued: usize,
}

impl OpsState {
    /// `Ok(())` when ready, else the one-line reason.
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(f) = self.fence.fatal() {
            return Err(format!("fatal latch set ({})", f.category.as_str()));
        }
        if self.health.is_draining() {
            return Err("draining: the gateway is stopping".to_owned());
        }
        if let Some((task, why)) = self.health.task_failure() {
            return Err(format!("internal task {task} ended unexpectedly ({why})"));
        }
        match self.health.last_poll_age() {
            None => return Err("no successful poll of the control plane yet".to_owned()),
            Some(age) if age > self.poll_freshness => {
                let kind = self.health.poll_health().last_poll_error_kind.unwrap_or("none");
                return Err(format!(
                    "last successful poll {}s ago (last error: {kind})",
                    age.as_secs()
                ));
            }
            Some(_) => {}
        }
        if let Some(down) = self.channels.status().iter().find(|c| !c.up) {
            return Err(format!(
                "downstream channel {} ({}) is down",
                down.channel, down.transport
            ));
        }
        Ok(())
    }

    pub fn status(&self) -> StatusDocument {
        let fatal = self.fence.fatal();
        let readiness = self.readiness();
        let state = if fatal.is_some() {
            "fatal"
        } else if self.health.is_draining() {
            "draining"
        } else if self.health.last_poll_age().is_none() {
            "starting"
        } else if readiness.is_ok() {
            "ready"
        } else {
            "degraded"
        };
        StatusDocument {
            schema_version: 1,
            version: env!("CARGO_PKG_VERSION"),
            mode: if self.fence.is_strict() { "strict" } else { "default" },
            state,
            ready: readiness.is_ok(),
            fence: self.fence.snapshot(),
            fatal,
            control_plane: self.health.poll_health(),
            downstream: self.channels.status(),
            commands: Commands {
                in_flight: self.health.in_flight(),
                queued: self.health.queued(),
            },
        }
    }
}

pub fn router(state: Arc<OpsState>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Binds the listener (errors name the address) and serves until `stop`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until `stop`; ending any other way is unexpected (its supervisor reports it).
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<OpsState>, stop: CancellationToken) -> TaskEnd {
    let stopped = stop.clone();
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
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
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        s.metrics.render(),
    )
        .into_response()
}
