//! The operator page: `GET /ui`, a server-rendered view of the `/status` document, and its
//! two assets, `/ui/app.js` (refreshes the page's parts from `/status` every second) and
//! `/ui/style.css`, embedded in the binary. The page performs no actions: it reads what
//! `/status` reads, and a latch is cleared only with the CLI.
//!
//! Security, on every route a browser page could read (`/ui`, its assets, `/status`,
//! `/events`; see [`is_page_route`]): a Content-Security-Policy that allows the page's
//! own origin only and no inline script or style, `nosniff`, no referrer, no framing, and
//! `Cache-Control: no-store`. Unless `ops.allow_remote` is set, a peer that is not loopback
//! is refused on every route, and on the page routes a `Host` that is not a loopback name
//! or address too (DNS rebinding: a page on another origin whose name was made to resolve
//! to 127.0.0.1 would otherwise read them). The probes (`/livez`, `/healthz`, `/readyz`,
//! `/metrics`) keep their behaviour: no `Host` rule.
//!
//! Its recent-events panel reads the log ring (`/events`), as the log printed it.
//!
//! Text from the gateway's peers (server names, reasons) is escaped by [`render::escape`] in the
//! server render, and set with `textContent` by the script.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::OpsState;

mod render;

/// What the page needs beyond the `/status` document: who may read it, and the latch file
/// its clear command names.
#[derive(Clone, Debug)]
pub(crate) struct PageSettings {
    /// `ops.allow_remote`: when false, only loopback peers and loopback `Host`s.
    pub allow_remote: bool,
    /// `strict.latch_file`, for the `tunnelgate latch clear` command the page shows.
    pub latch_file: PathBuf,
    /// `coordination.backend = "etcd"`: clearing also needs the configuration.
    pub coordinated: bool,
}

/// The policy on every page route: the page's own origin only, no inline script or style.
pub(crate) const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The log events the page shows, newest first (`app.js` asks `/events` for as many).
pub(crate) const EVENTS_SHOWN: usize = 50;

const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

impl PageSettings {
    /// The exact command that clears the latch, for the operator to copy.
    pub(crate) fn clear_command(&self) -> String {
        self.latch_command("clear")
    }

    /// The command that prints the persisted cause (`latch show`).
    pub(crate) fn show_command(&self) -> String {
        self.latch_command("show")
    }

    /// With coordination the cluster-wide latch is on etcd, which only the configuration
    /// names: the operator fills in its path (the gateway does not know which file it was).
    fn latch_command(&self, action: &str) -> String {
        let file = self.latch_file.display();
        if self.coordinated {
            format!("tunnelgate latch {action} --config CONFIG.toml --latch-file {file}")
        } else {
            format!("tunnelgate latch {action} --latch-file {file}")
        }
    }
}

/// The page and its assets.
pub(super) fn routes() -> Router<Arc<OpsState>> {
    Router::new()
        .route("/ui", get(page))
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
}

async fn page(State(s): State<Arc<OpsState>>) -> Response {
    let doc = serde_json::to_value(s.status()).expect("the status document serializes");
    let commands = render::LatchCommands {
        show: s.page.show_command(),
        clear: s.page.clear_command(),
    };
    let events = serde_json::to_value(s.events(EVENTS_SHOWN)).expect("the events document serializes");
    let html = render::page(&doc, &events, &commands);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Whether a browser page could read this route: the page, its assets, `/status`, `/events`.
pub(crate) fn is_page_route(path: &str) -> bool {
    matches!(path, "/ui" | "/status" | "/events") || path.starts_with("/ui/")
}

/// Whether `host` (a `Host` header's value) names this machine's loopback: `localhost`,
/// an address in 127.0.0.0/8 or `[::1]`, with or without a port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let valid_port = |p: &str| p.is_empty() || p.strip_prefix(':').is_some_and(|n| n.parse::<u16>().is_ok());
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) if valid_port(port) => ip,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.parse::<u16>().is_ok() => name,
            Some(_) => return false,
            None => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a request is refused, when it is: a peer that is not loopback, or (on a page
/// route) a `Host` that is not loopback. `None` lets it through.
pub(crate) fn refusal(
    allow_remote: bool,
    peer: Option<SocketAddr>,
    path: &str,
    headers: &HeaderMap,
) -> Option<&'static str> {
    let loopback_peer = peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
    // The official client's health routes answer loopback peers only, whatever else is allowed.
    if (path == "/health" || path.starts_with("/health/")) && !loopback_peer {
        return Some("forbidden: /health serves loopback clients only\n");
    }
    if allow_remote {
        return None;
    }
    if !peer.is_some_and(|p| p.ip().to_canonical().is_loopback()) {
        return Some("forbidden: the ops listener serves loopback clients only (ops.allow_remote is not set)\n");
    }
    if !is_page_route(path) {
        return None;
    }
    match headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        Some(host) if is_loopback_host(host) => None,
        _ => Some("forbidden: the Host header must name a loopback address (localhost, 127.0.0.1, [::1])\n"),
    }
}

/// The access rules, then the page headers on the page routes.
pub(super) async fn guard(State(s): State<Arc<OpsState>>, request: Request<Body>, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let path = request.uri().path().to_owned();
    if let Some(reason) = refusal(s.page.allow_remote, peer, &path, request.headers()) {
        let mut refused = (StatusCode::FORBIDDEN, reason).into_response();
        page_headers(refused.headers_mut());
        return refused;
    }
    let mut response = next.run(request).await;
    if is_page_route(&path) {
        page_headers(response.headers_mut());
    }
    response
}

fn page_headers(h: &mut HeaderMap) {
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        h.insert(name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests;
