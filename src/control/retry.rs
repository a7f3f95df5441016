//! When a response POST is tried again, and when the next try starts. Pure: the
//! delivery loop in `client/delivery.rs` asks after every attempt and does what it is told.

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{AttemptResult, PostKind};

/// Longest pause between two attempts of one delivery.
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(5);

/// The attempt budget of one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RetryPolicy {
    max_attempts: u32,
}

/// Where a delivery stands after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AfterAttempt {
    /// 1 for the first attempt.
    pub attempt: u32,
    pub result: AttemptResult,
    pub status: Option<u16>,
    /// The command's deadline has not passed.
    pub deadline_left: bool,
    pub cancelled: bool,
}

impl RetryPolicy {
    /// `post_attempts`, at least one. Notifications get the same budget as terminal
    /// responses; only their retryable set is smaller.
    pub(super) fn new(post_attempts: u32) -> Self {
        Self {
            max_attempts: post_attempts.max(1),
        }
    }

    /// Whether the delivery ends with this attempt.
    pub(super) fn settles(self, kind: PostKind, a: AfterAttempt) -> bool {
        a.attempt >= self.max_attempts || !a.result.is_retryable(kind, a.status) || !a.deadline_left || a.cancelled
    }
}

/// When the next attempt starts: after `delay` (capped at [`MAX_PAUSE`]), never later
/// than the deadline.
pub(super) fn next_try(delay: Duration, deadline: Option<Instant>, now: Instant) -> Instant {
    let wake = now + delay.min(MAX_PAUSE);
    deadline.map_or(wake, |d| d.min(wake))
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptResult as A;
    use PostKind::{Notify, Terminal};

    fn after(attempt: u32, result: AttemptResult, status: Option<u16>) -> AfterAttempt {
        AfterAttempt {
            attempt,
            result,
            status,
            deadline_left: true,
            cancelled: false,
        }
    }

    #[test]
    fn a_delivery_settles_on_a_final_result_the_budget_the_deadline_or_a_cancel() {
        let policy = RetryPolicy::new(3);
        let table = [
            (after(1, A::Ok, Some(200)), Terminal, true),
            (after(1, A::NotFound, Some(404)), Terminal, true),
            (after(1, A::RetryableStatus, Some(503)), Terminal, false),
            (after(2, A::RetryableStatus, Some(503)), Terminal, false),
            (after(3, A::RetryableStatus, Some(503)), Terminal, true),
            (after(1, A::Timeout, None), Terminal, false),
            (
                AfterAttempt {
                    deadline_left: false,
                    ..after(1, A::Timeout, None)
                },
                Terminal,
                true,
            ),
            (
                AfterAttempt {
                    cancelled: true,
                    ..after(1, A::RetryableStatus, Some(503))
                },
                Terminal,
                true,
            ),
        ];
        for (a, kind, settles) in table {
            assert_eq!(policy.settles(kind, a), settles, "{a:?} {kind:?}");
            // The same decision as the attempt's own retryable set says, for notifications.
            if a.attempt < 3 && a.deadline_left && !a.cancelled {
                assert_eq!(
                    policy.settles(Notify, a),
                    !a.result.is_retryable(Notify, a.status),
                    "{a:?}"
                );
            }
        }
    }

    #[test]
    fn a_zero_budget_still_makes_one_attempt() {
        assert!(RetryPolicy::new(0).settles(Terminal, after(1, A::RetryableStatus, Some(503))));
        assert!(!RetryPolicy::new(2).settles(Terminal, after(1, A::RetryableStatus, Some(503))));
    }

    #[test]
    fn the_next_try_waits_at_most_the_cap_and_never_past_the_deadline() {
        let now = Instant::now();
        assert_eq!(
            next_try(Duration::from_secs(1), None, now),
            now + Duration::from_secs(1)
        );
        assert_eq!(next_try(Duration::from_secs(60), None, now), now + MAX_PAUSE);
        let deadline = now + Duration::from_millis(300);
        assert_eq!(next_try(Duration::from_secs(1), Some(deadline), now), deadline);
    }
}
