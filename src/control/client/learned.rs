//! The learned poll wait on a proxied route: a proxy that closes a long poll held open
//! too long (its idle timeout is shorter than `control_plane.poll_timeout`) makes every
//! long poll fail; the gateway learns a wait the proxy lets through, as the official
//! client does (`control-plane proxy closed long poll; lowering future poll timeout`).
//!
//! Invariants:
//! - learned only from a long poll on a proxied route (an explicit or environment proxy)
//!   whose connection ended after the request went out and before any response header,
//!   with no deadline of the gateway's fired;
//! - `margin = min(max(POLL_SLACK, 5 s), elapsed / 2)`, `learned = max(elapsed − margin,
//!   5 s)` in whole milliseconds; nothing is learned when `elapsed ≤ 5 s`, `elapsed ≥
//!   attempted + POLL_SLACK`, `attempted ≤ 5 s` or `learned ≥ attempted`;
//! - process-wide, it only ever decreases, never below 5 s, never above `poll_timeout`;
//!   later long polls ask for it (`timeout_ms`) and wait it plus the slack; a change is
//!   logged once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::urls::PollUrls;

/// The learned wait's floor.
pub(super) const FLOOR: Duration = Duration::from_secs(5);

/// The wait learned so far, and the poll URLs that ask for it.
#[derive(Default)]
pub(super) struct Learned {
    /// Milliseconds; 0 while nothing is learned.
    ms: AtomicU64,
    urls: Mutex<Option<Arc<PollUrls>>>,
}

impl Learned {
    /// The poll URLs of the learned wait, once there is one.
    pub(super) fn urls(&self) -> Option<Arc<PollUrls>> {
        if self.ms.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.urls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The wait to learn from a long poll of `attempted` that the proxy closed after
    /// `elapsed`, if any, and lower than what is known; `slack` is the gateway's own
    /// margin on a poll (its guardrail).
    pub(super) fn lower(&self, elapsed: Duration, attempted: Duration, slack: Duration) -> Option<Duration> {
        if elapsed <= FLOOR || elapsed >= attempted + slack || attempted <= FLOOR {
            return None;
        }
        let margin = slack.max(FLOOR).min(elapsed / 2);
        let learned =
            Duration::from_millis(u64::try_from((elapsed - margin).as_millis()).unwrap_or(u64::MAX)).max(FLOOR);
        if learned >= attempted {
            return None;
        }
        let ms = u64::try_from(learned.as_millis()).unwrap_or(u64::MAX);
        let known = self.ms.load(Ordering::Acquire);
        (known == 0 || ms < known).then_some(learned)
    }

    /// Learns from a long poll of `attempted` closed after `elapsed` (as
    /// [`Learned::lower`] says), with the poll URLs (`poll_url`, `filter`) that ask for
    /// the new wait; returns it when it changed.
    pub(super) fn learn(
        &self,
        (elapsed, attempted, slack): (Duration, Duration, Duration),
        poll_url: &str,
        filter: &str,
    ) -> Option<Duration> {
        let wait = self.lower(elapsed, attempted, slack)?;
        let urls = PollUrls::parse(poll_url, filter, wait).ok()?;
        self.keep(wait, urls);
        Some(wait)
    }

    /// Keeps `wait` and the poll URLs that ask for it.
    pub(super) fn keep(&self, wait: Duration, urls: PollUrls) {
        *self.urls.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(urls));
        self.ms
            .store(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLACK: Duration = Duration::from_secs(10);

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_proxy_cut_teaches_a_shorter_wait_by_the_upstream_rule() {
        let learned = Learned::default();
        // Cut at 8 s of a 20 s poll: margin min(10, 4) = 4, learned 5 s (the floor).
        assert_eq!(learned.lower(s(8.0), s(20.0), SLACK), Some(s(5.0)));
        // Cut at 30 s of a 60 s poll: margin min(10, 15) = 10, learned 20 s.
        assert_eq!(learned.lower(s(30.0), s(60.0), SLACK), Some(s(20.0)));
        assert_eq!(
            learned.lower(s(30.0004), s(60.0), SLACK),
            Some(s(20.0)),
            "whole milliseconds"
        );
    }

    #[test]
    fn nothing_is_learned_outside_the_rule_and_the_wait_only_decreases() {
        let learned = Learned::default();
        assert_eq!(learned.lower(s(5.0), s(20.0), SLACK), None, "elapsed at most 5 s");
        assert_eq!(
            learned.lower(s(30.0), s(20.0), SLACK),
            None,
            "elapsed past the poll and its slack"
        );
        assert_eq!(learned.lower(s(4.0), s(5.0), SLACK), None, "attempted at most 5 s");
        assert_eq!(
            learned.lower(s(15.9), s(6.0), SLACK),
            None,
            "not shorter than attempted"
        );
        let urls = PollUrls::parse("http://cp.example/v1/tunnels/t/poll", "", s(20.0)).unwrap();
        learned.keep(s(20.0), urls);
        assert!(learned.urls().is_some());
        assert_eq!(learned.lower(s(42.0), s(50.0), SLACK), None, "32 s is not below 20 s");
        assert_eq!(learned.lower(s(30.0), s(50.0), SLACK), None, "20 s is not below 20 s");
        assert_eq!(learned.lower(s(20.0), s(50.0), SLACK), Some(s(10.0)));
    }
}
