//! `X-Tunnel-MCP-Server-Info` as it stands when a request is sent: what a channel
//! declares may change while the gateway runs (channel `harpoon` is declared only while
//! it has a target; an HTTP channel is process-affine only while the era bridge keeps a
//! session or calls in this process), as upstream recomputes the header per request.
//!
//! Invariants:
//! - the header is rendered once per state of the flags it reads, and reused while they
//!   hold: a request pays a few atomic loads, not a serialization;
//! - a state whose rendering breaks the contract's bounds sends no header (as at start).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use http::header::HeaderValue;

/// The flags a declaration reads (at most 64), and how a state of them renders.
pub(crate) struct ServerInfoSource {
    flags: Vec<Arc<AtomicBool>>,
    /// The header for a state of the flags (bit `i` is `flags[i]`).
    render: Box<dyn Fn(u64) -> Option<String> + Send + Sync>,
    last: Mutex<Option<(u64, Option<HeaderValue>)>>,
}

impl ServerInfoSource {
    /// A declaration reading `flags` (at most 64; more are read as unset).
    pub(crate) fn new(
        flags: Vec<Arc<AtomicBool>>,
        render: impl Fn(u64) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            flags,
            render: Box::new(render),
            last: Mutex::new(None),
        }
    }

    /// The header for the flags as they are now.
    pub(crate) fn header(&self) -> Option<HeaderValue> {
        let state = self.flags.iter().take(64).enumerate().fold(0u64, |state, (i, flag)| {
            state | (u64::from(flag.load(Ordering::Acquire)) << i)
        });
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, header)) = &*last {
            if *seen == state {
                return header.clone();
            }
        }
        let header = (self.render)(state).and_then(|text| HeaderValue::from_str(&text).ok());
        *last = Some((state, header.clone()));
        header
    }
}

impl std::fmt::Debug for ServerInfoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerInfoSource")
            .field("flags", &self.flags.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_of_the_flags_renders_once_and_a_change_is_seen_by_the_next_request() {
        let flag = Arc::new(AtomicBool::new(false));
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = renders.clone();
        let source = ServerInfoSource::new(vec![flag.clone()], move |state| {
            counted.fetch_add(1, Ordering::Relaxed);
            Some(format!("state {state}"))
        });
        assert_eq!(source.header().unwrap(), "state 0");
        assert_eq!(source.header().unwrap(), "state 0");
        assert_eq!(renders.load(Ordering::Relaxed), 1, "reused while the flags hold");
        flag.store(true, Ordering::Release);
        assert_eq!(source.header().unwrap(), "state 1");
        let broken = ServerInfoSource::new(Vec::new(), |_| Some("bad\nvalue".to_owned()));
        assert!(
            broken.header().is_none(),
            "a value that is not a header value is not sent"
        );
    }
}
