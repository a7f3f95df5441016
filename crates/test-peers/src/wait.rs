//! Bounded waits: poll a condition until it holds, panic naming what was awaited when the
//! deadline passes.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Pause between two checks of a polled condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `condition` until it is true; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, timeout, || {
        let fut = condition();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// Polls `probe` until it yields a value and returns it; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_every(what, timeout, POLL_INTERVAL, probe).await
}

/// [`wait_for`], checking every `interval` (for a probe that costs the peer something, or
/// one that must see a change soon after it happens).
pub async fn wait_for_every<T, F, Fut>(what: &str, timeout: Duration, interval: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_first_value_the_probe_yields() {
        let calls = AtomicU32::new(0);
        let value = wait_for("the third call", Duration::from_secs(5), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 50ms waiting for nothing")]
    async fn wait_until_panics_naming_what_it_waited_for() {
        wait_until("nothing", Duration::from_millis(50), || async { false }).await;
    }
}
