//! `GET /events`: the log ring's recent events, newest last, with the ring's counts.
//!
//! What the ring holds is what the log printed (see `telemetry::ring`), so this serves
//! nothing the log does not show. Never cached: `Cache-Control: no-store`.
//!
//! API: `{"capacity","held","dropped","bytes","events":[...]}`; `?limit=N` (a whole
//! number) returns the newest N, at most the ring's capacity; any other query is `400`
//! with the reason.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::OpsState;
use crate::telemetry::{LogEvent, RingStats};

/// The `/events` document.
#[derive(Serialize)]
pub(crate) struct EventsDocument {
    #[serde(flatten)]
    pub stats: RingStats,
    pub events: Vec<LogEvent>,
}

impl OpsState {
    /// The newest `limit` events held (at most the ring's capacity) and the ring's counts.
    pub(crate) fn events(&self, limit: usize) -> EventsDocument {
        let ring = &self.log_ring;
        EventsDocument {
            events: ring.snapshot(limit.min(ring.capacity())),
            stats: ring.stats(),
        }
    }
}

/// Why a `/events` query was refused (its `Display` is the `400` body).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum EventsQueryError {
    #[error("limit {0:?} is not a whole number of events")]
    Limit(String),
    #[error("unknown query parameter {0:?}; /events takes only limit")]
    Unknown(String),
}

/// The number of events asked for by `query` (all held when it says nothing).
pub(super) fn limit(query: Option<&str>) -> Result<Option<usize>, EventsQueryError> {
    let mut limit = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "limit" {
            return Err(EventsQueryError::Unknown(shown(name)));
        }
        let n = value
            .parse::<usize>()
            .map_err(|_| EventsQueryError::Limit(shown(value)))?;
        limit = Some(n);
    }
    Ok(limit)
}

/// A query text as an error may show it: short, so a long query is not echoed whole.
fn shown(text: &str) -> String {
    text.chars().take(32).collect()
}

pub(super) async fn events(State(s): State<Arc<OpsState>>, RawQuery(query): RawQuery) -> Response {
    let headers = [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    match limit(query.as_deref()) {
        Ok(limit) => (headers, axum::Json(s.events(limit.unwrap_or(usize::MAX)))).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, headers, format!("{e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_whole_number_and_nothing_else_is_taken() {
        assert_eq!(limit(None), Ok(None));
        assert_eq!(limit(Some("")), Ok(None));
        assert_eq!(limit(Some("limit=5")), Ok(Some(5)));
        assert_eq!(limit(Some("limit=-1")), Err(EventsQueryError::Limit("-1".into())));
        assert_eq!(limit(Some("limit=")), Err(EventsQueryError::Limit(String::new())));
        assert_eq!(limit(Some("limit")), Err(EventsQueryError::Limit(String::new())));
        assert_eq!(limit(Some("since=3")), Err(EventsQueryError::Unknown("since".into())));
        let long = "x".repeat(1000);
        let e = limit(Some(&format!("limit={long}"))).unwrap_err().to_string();
        assert!(e.len() < 100, "{e}");
    }
}
