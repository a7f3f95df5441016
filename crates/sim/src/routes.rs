//! The simulator's route table: the control-plane endpoints (`control`) and the MCP
//! ingress (`ingress`) on one router over the shared state.
//!
//! Kept apart from `server`, the accept loop that serves any router (the embedded stub
//! uses it too), so that the handlers can depend on the server's connection handle
//! without the server depending on the handlers.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use super::state::Shared;
use super::{control, ingress};

/// The simulator's routes.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/tunnels/{tunnel_id}", get(control::tunnel))
        .route("/v1/tunnels/{tunnel_id}/poll", get(control::poll))
        .route("/v1/tunnels/{tunnel_id}/response", post(control::response))
        .route(
            "/v1/mcp/{tunnel_id}",
            post(ingress::post).delete(ingress::delete).get(ingress::get),
        )
        .with_state(shared)
}
