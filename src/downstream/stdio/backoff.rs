//! Restart backoff for stdio children (pure).
//!
//! The first spawn waits for nothing; each restart after a short-lived child doubles the
//! wait from `min` up to `max`; a child that lived longer than [`HEALTHY_LIFETIME`] resets
//! the count, so its restart waits `min` again.

use std::time::Duration;

/// A child that lived at least this long was healthy: its exit starts a fresh backoff.
pub(super) const HEALTHY_LIFETIME: Duration = Duration::from_secs(30);

/// The wait before the next spawn after `failures` consecutive failed or short-lived
/// children: zero for none, then `min`, `2 min`, `4 min`, ... capped at `max`.
pub(super) fn restart_delay(failures: u32, min: Duration, max: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
    min.saturating_mul(factor).min(max)
}

/// The failure count after a child that lived `lived` exited (or could not be spawned:
/// `lived` is zero then).
pub(super) fn failures_after_exit(failures: u32, lived: Duration) -> u32 {
    if lived > HEALTHY_LIFETIME {
        1
    } else {
        failures.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(10);

    #[test]
    fn the_first_spawn_does_not_wait_and_restarts_double_up_to_the_cap() {
        let waits: Vec<u128> = (0..10).map(|n| restart_delay(n, MIN, MAX).as_millis()).collect();
        assert_eq!(waits, [0, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]);
    }

    #[test]
    fn huge_failure_counts_saturate_at_the_cap() {
        for n in [31, 32, 33, 1_000, u32::MAX] {
            assert_eq!(restart_delay(n, MIN, MAX), MAX, "{n}");
        }
    }

    #[test]
    fn a_cap_below_the_minimum_wins() {
        assert_eq!(
            restart_delay(1, Duration::from_secs(5), Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_long_lived_child_resets_the_count_and_a_short_lived_one_grows_it() {
        assert_eq!(failures_after_exit(6, Duration::from_secs(31)), 1);
        assert_eq!(failures_after_exit(6, Duration::from_secs(30)), 7);
        assert_eq!(failures_after_exit(0, Duration::ZERO), 1);
        assert_eq!(failures_after_exit(u32::MAX, Duration::ZERO), u32::MAX);
        let after_reset = failures_after_exit(9, HEALTHY_LIFETIME + Duration::from_millis(1));
        assert_eq!(restart_delay(after_reset, MIN, MAX), MIN);
    }
}
