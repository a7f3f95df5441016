//! Backoff math for polls: jittered exponential, `Retry-After` as a floor, capped. Pure.

use std::time::{Duration, SystemTime};

/// Poll retry schedule: 200 ms doubling to 10 s, with "equal jitter" (half fixed, half
/// random) so a fleet does not retry in lockstep.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    failures: u32,
    base: Duration,
    max: Duration,
}

/// `Retry-After` is honoured as a minimum but never beyond this.
pub(crate) const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);
/// 401/403 need an operator: never retry faster than this.
pub(crate) const UNAUTHORIZED_FLOOR: Duration = Duration::from_secs(10);

impl Default for Backoff {
    fn default() -> Self {
        Self {
            failures: 0,
            base: Duration::from_millis(200),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a failure and returns the delay before the next try. `jitter` is a sample
    /// in `[0, 1)`; `floor` is a server-imposed minimum (`Retry-After`, already capped).
    pub(crate) fn next_delay(&mut self, jitter: f64, floor: Option<Duration>) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32.checked_shl(self.failures.min(16)).unwrap_or(u32::MAX))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        let half = exp / 2;
        let jittered = half + half.mul_f64(jitter.clamp(0.0, 1.0));
        jittered.max(floor.unwrap_or(Duration::ZERO))
    }
}

/// Parses `Retry-After` (delta-seconds or HTTP-date) relative to `now`, capped at
/// [`RETRY_AFTER_CAP`]. A date in the past means "now"; garbage means no floor.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let delay = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(delay.min(RETRY_AFTER_CAP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delays_double_and_cap() {
        let mut b = Backoff::default();
        let got: Vec<u128> = (0..8).map(|_| b.next_delay(0.999_999, None).as_millis()).collect();
        assert_eq!(got, vec![199, 399, 799, 1599, 3199, 6399, 9999, 9999]);
        b.reset();
        assert_eq!(b.next_delay(0.0, None), Duration::from_millis(100));
    }

    #[test]
    fn retry_after_is_a_floor() {
        let mut b = Backoff::default();
        assert_eq!(b.next_delay(0.5, Some(Duration::from_secs(7))), Duration::from_secs(7));
    }

    #[test]
    fn retry_after_parses_both_forms_and_caps() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 120 ", now), Some(RETRY_AFTER_CAP));
        assert_eq!(parse_retry_after("99999999999999999999999", now), Some(RETRY_AFTER_CAP));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(5));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(5)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(5));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    proptest! {
        #[test]
        fn delays_stay_within_bounds(failures in 0u32..100, jitter in 0.0f64..1.0, floor in proptest::option::of(0u64..120)) {
            let mut b = Backoff::default();
            for _ in 0..failures { b.next_delay(jitter, None); }
            let floor = floor.map(Duration::from_secs).map(|d| d.min(RETRY_AFTER_CAP));
            let d = b.next_delay(jitter, floor);
            prop_assert!(d <= Duration::from_secs(10).max(floor.unwrap_or_default()));
            prop_assert!(d >= Duration::from_millis(100).min(Duration::from_secs(5)) || failures == 0);
            if let Some(f) = floor { prop_assert!(d >= f); }
        }
    }
}
