//! The poll loop: asks the control plane for as many commands as the gateway has room
//! for, hands each answered batch on, and owns the retry policy of polls (the backoff,
//! its floor for refused credentials, and quick polls until the control plane answers).
//!
//! It decides nothing about commands: the batches go to a [`PollSink`] (the dispatcher),
//! which also says how much room there is.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::backoff::{Backoff, UNAUTHORIZED_FLOOR};
use super::client::{ControlClient, PollError, PollErrorKind, PollWait, Polled};
use crate::telemetry::{Metrics, PollResult};

/// Most commands one poll asks for (the contract's `limit` maximum).
const MAX_POLL_LIMIT: usize = 25;

/// Where answered polls go, and how much room there is for them.
pub(crate) trait PollSink {
    /// Commands the gateway can take now; `0` when the prefetch queue is full.
    fn free_slots(&self) -> usize;
    /// Resolves when room may have been made. A lost wakeup is harmless: the poller
    /// checks [`free_slots`](Self::free_slots) again.
    fn room(&self) -> impl Future<Output = ()>;
    /// A poll succeeded: its commands (possibly none) are the gateway's now.
    fn polled(&self, polled: Polled);
    /// A poll failed.
    fn poll_failed(&self, error: &PollError);
    /// Whether a poll may be sent now: asked before every poll. A replica whose
    /// coordination term has lapsed by its own clock answers `false`, so that it takes
    /// no command its successor should have, however late its coordinator notices.
    fn may_poll(&self) -> bool {
        true
    }
}

/// How often a closed poll gate is looked at again.
const GATE_RECHECK: Duration = Duration::from_millis(20);

/// The poller of one run. Built once, with its client and bounds; each run of the loop
/// starts from a [`fresh`](Self::fresh) one.
pub(crate) struct Poller {
    client: ControlClient,
    metrics: Arc<Metrics>,
    backoff: Backoff,
    /// Bound on reading an answered poll's body once latched, and on waiting for an open
    /// poll's answer after a latch.
    cleanup_timeout: Duration,
    /// Bound on waiting for an open poll's answer after a stop (`strict.shutdown_grace`):
    /// a poll is never dropped while the control plane may still hand it commands.
    open_poll_grace: Duration,
    /// A poll has succeeded in this run.
    succeeded: bool,
}

/// What the poller does after a poll failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Retry {
    pub(crate) delay: Duration,
    /// The credentials were refused: an operator must act, so it is logged as an error.
    pub(crate) needs_operator: bool,
}

impl Poller {
    /// `bounds`: the cleanup time (after a latch) and the grace (after a stop) an open
    /// poll's answer is waited for.
    pub(crate) fn new(client: ControlClient, metrics: Arc<Metrics>, bounds: (Duration, Duration)) -> Self {
        let (cleanup_timeout, open_poll_grace) = bounds;
        Self {
            client,
            metrics,
            backoff: Backoff::default(),
            cleanup_timeout,
            open_poll_grace,
            succeeded: false,
        }
    }

    /// A poller with this one's client and bounds, as [`Poller::new`] built it: no poll
    /// has succeeded yet and the backoff has seen no failure (a run of the loop starts
    /// from one, as a replica does each time it becomes the active).
    pub(crate) fn fresh(&self) -> Self {
        Self::new(
            self.client.clone(),
            self.metrics.clone(),
            (self.cleanup_timeout, self.open_poll_grace),
        )
    }

    /// Runs until `stop` or `latched` is cancelled.
    ///
    /// Asks for `min(free slots, 25)` commands, pauses while the sink is full, and hands
    /// on every command returned, even beyond the limit.
    pub(crate) async fn run(mut self, sink: &impl PollSink, stop: &CancellationToken, latched: &CancellationToken) {
        while let Some(free) = self.wait_for_room(sink, stop, latched).await {
            let Some(result) = self.poll_once(free, stop, latched).await else {
                break;
            };
            match result {
                Ok(polled) => {
                    self.backoff.reset();
                    self.succeeded = true;
                    self.metrics.poll_succeeded_at(unix_now());
                    self.metrics.poll_finished(if polled.commands.is_empty() {
                        PollResult::Empty
                    } else {
                        PollResult::Commands
                    });
                    sink.polled(polled);
                }
                Err(e) => {
                    self.metrics.poll_failed(e.kind);
                    sink.poll_failed(&e);
                    let retry = self.retry(&e, rand::random::<f64>());
                    log_retry(&e, retry, self.backoff.failures());
                    tokio::select! {
                        biased;
                        // cancel-safe: waiting only.
                        _ = stop.cancelled() => break,
                        // cancel-safe: waiting only.
                        _ = latched.cancelled() => break,
                        // cancel-safe: a sleep.
                        _ = tokio::time::sleep(retry.delay) => {}
                    }
                }
            }
        }
        tracing::info!("polling stopped");
    }

    /// The free slots once there are some and the sink's gate is open; `None` when
    /// stopping.
    async fn wait_for_room(
        &self,
        sink: &impl PollSink,
        stop: &CancellationToken,
        latched: &CancellationToken,
    ) -> Option<usize> {
        let mut told_gate = false;
        loop {
            // No new poll once stopping (an open one is waited for in `poll_once`).
            if stop.is_cancelled() || latched.is_cancelled() {
                return None;
            }
            let free = sink.free_slots();
            let open = sink.may_poll();
            if free > 0 && open {
                tracing::debug!(free, "polling for more commands");
                return Some(free);
            }
            if !open && !std::mem::replace(&mut told_gate, true) {
                tracing::info!(
                    "no poll: this replica may not admit now (its coordination term has lapsed by its own clock)"
                );
            }
            tokio::select! {
                biased;
                // cancel-safe: waiting only.
                _ = stop.cancelled() => return None,
                // cancel-safe: waiting only.
                _ = latched.cancelled() => return None,
                // cancel-safe: a lost wakeup is re-checked by the loop.
                () = sink.room(), if open => {}
                // cancel-safe: a sleep; the gate is looked at again.
                () = tokio::time::sleep(GATE_RECHECK), if !open => {}
            }
        }
    }

    /// One poll, its body read whole; `None` when it was abandoned.
    ///
    /// A stop (or a latch) does not drop an open poll: the control plane may hand it
    /// commands until it sees the connection close, and those would go unanswered. Its
    /// answer is waited for within the grace after a stop (the cleanup time after a
    /// latch), and its commands are handed on like any others (refused "not executed"
    /// once stopping). Only a poll still open when that bound runs out is dropped, and
    /// counted (`tunnelgate_polls_abandoned_total`).
    async fn poll_once(
        &self,
        free: usize,
        stop: &CancellationToken,
        latched: &CancellationToken,
    ) -> Option<Result<Polled, PollError>> {
        let answered = tokio::select! {
            biased;
            r = self.client.poll(free.min(MAX_POLL_LIMIT), self.wait()) => r,
            // cancel-safe: waiting only; the poll above is what must not be dropped early.
            bound = self.stopping_bound(stop, latched) => {
                self.metrics.poll_abandoned();
                tracing::warn!(
                    waited_ms = bound.as_millis() as u64,
                    "an open poll was not answered within the bound after the stop; it is dropped, and any commands the control plane hands it now are unanswered"
                );
                return None;
            }
        };
        // Headers arrived: the body's commands are ours. It is read whole even when a
        // stop or a latch comes meanwhile (bounded by the cleanup time from then), so
        // that each command gets its answer ("not executed" once stopping).
        let answer = match answered {
            Ok(answer) => answer,
            Err(e) => return Some(Err(e)),
        };
        Some(tokio::select! {
            biased;
            r = self.client.read_commands(answer) => r,
            // cancel-safe: waiting only; the read above is what must not be dropped early.
            () = stop_then(stop, latched, self.cleanup_timeout) => {
                tracing::warn!("an answered poll's body was not read within the cleanup time after the stop; its commands are lost");
                Err(PollError::new(PollErrorKind::Timeout, Some(200), None))
            }
        })
    }

    /// Quick until a poll succeeds (at start, and after each failure), long after that.
    fn wait(&self) -> PollWait {
        if !self.succeeded || self.backoff.failures() > 0 {
            PollWait::Quick
        } else {
            PollWait::Long
        }
    }

    /// Records the failure and says how long to wait: the backoff with `jitter` in
    /// `[0, 1)`, the server's `Retry-After` as a floor, and never under
    /// [`UNAUTHORIZED_FLOOR`] for refused credentials.
    fn retry(&mut self, error: &PollError, jitter: f64) -> Retry {
        let delay = self.backoff.next_delay(jitter, error.retry_after);
        let needs_operator = error.kind == PollErrorKind::Unauthorized;
        Retry {
            delay: if needs_operator {
                delay.max(UNAUTHORIZED_FLOOR)
            } else {
                delay
            },
            needs_operator,
        }
    }
}

fn log_retry(e: &PollError, retry: Retry, failures: u32) {
    if e.kind == PollErrorKind::LocalExhaustion {
        tracing::warn!(
            kind = e.kind(),
            failures,
            retry_in_ms = retry.delay.as_millis() as u64,
            "poll not sent: {}; backing off (the control plane is not at fault)",
            crate::descriptors::EXHAUSTION_WORDS
        );
    } else if retry.needs_operator {
        tracing::error!(
            status = e.status,
            retry_in_ms = retry.delay.as_millis() as u64,
            "the control plane refused the API key or tunnel; an operator must fix the credentials"
        );
    } else {
        tracing::warn!(
            kind = e.kind(),
            status = e.status,
            failures,
            retry_in_ms = retry.delay.as_millis() as u64,
            "poll failed; backing off"
        );
    }
}

impl Poller {
    /// Resolves once the bound an open poll is waited for has run out: the grace after a
    /// stop, the cleanup time after a latch (whichever ends first); returns that bound.
    async fn stopping_bound(&self, stop: &CancellationToken, latched: &CancellationToken) -> Duration {
        let after_stop = async {
            stop.cancelled().await;
            tokio::time::sleep(self.open_poll_grace).await;
            self.open_poll_grace
        };
        let after_latch = async {
            latched.cancelled().await;
            tokio::time::sleep(self.cleanup_timeout).await;
            self.cleanup_timeout
        };
        tokio::select! {
            // cancel-safe: waiting only.
            d = after_stop => d,
            // cancel-safe: waiting only.
            d = after_latch => d,
        }
    }
}

/// Resolves `bound` after `stop` or `latched` is cancelled.
async fn stop_then(stop: &CancellationToken, latched: &CancellationToken, bound: Duration) {
    tokio::select! {
        // cancel-safe: waiting only.
        () = stop.cancelled() => {}
        // cancel-safe: waiting only.
        () = latched.cancelled() => {}
    }
    tokio::time::sleep(bound).await;
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests;
