//! When a child starts and what its end does to the channel: the spawn a call may
//! trigger, the restart backoff, and the bookkeeping of exits, reaps and held children.
//!
//! Invariants:
//! - a spawn happens right after `Admission::recheck()` succeeded, under the state
//!   lock, with no `.await` in between;
//! - no new child starts while the previous one is unreaped (still running, or a
//!   descendant still holds its stdout): a child that outlived SIGKILL is held, reported
//!   once, and a call meanwhile ends `not_sent`;
//! - after `shutdown` or `kill_now` nothing is ever spawned again;
//! - a failed spawn, a short-lived child and a child whose handshake failed each grow the
//!   restart backoff ([`super::backoff`]); no spawn happens before it is over.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::child::{self, Child};
use super::{backoff, Shared, State};
use crate::downstream::LegFailure;
use crate::strict::Admission;

/// What `ensure_child` does next, decided under the state lock.
enum Step {
    Ready(Arc<Child>),
    Fail(LegFailure),
    Sleep(Instant),
    AwaitRelease(Arc<Child>),
}

impl Shared {
    /// A running child, spawning one if allowed: not stopped, the previous child reaped,
    /// the backoff over before `limit`, and the admission still valid.
    pub(super) async fn ensure_child(
        self: &Arc<Self>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<Arc<Child>, LegFailure> {
        loop {
            let step = {
                let mut st = self.lock();
                let now = Instant::now();
                if st.stopped {
                    Step::Fail(LegFailure::ChildNotRunning)
                } else if let Some(c) = st.child.clone() {
                    if c.is_usable() {
                        Step::Ready(c)
                    } else if c.held.is_cancelled() || limit <= now {
                        Step::Fail(LegFailure::ChildNotRunning)
                    } else {
                        Step::AwaitRelease(c)
                    }
                } else if let Some(at) = st.next_spawn_at.filter(|at| *at > now) {
                    if at > limit {
                        Step::Fail(LegFailure::ChildNotRunning)
                    } else {
                        Step::Sleep(at)
                    }
                } else if admission.recheck().is_err() {
                    Step::Fail(LegFailure::NotAdmitted)
                } else {
                    match self.spawn_locked(&mut st) {
                        Ok(c) => Step::Ready(c),
                        Err(f) => Step::Fail(f),
                    }
                }
            };
            match step {
                Step::Ready(c) => return Ok(c),
                Step::Fail(f) => return Err(f),
                Step::Sleep(at) => sleep_until(at).await,
                Step::AwaitRelease(c) => {
                    let released = tokio::select! {
                        biased;
                        // cancel-safe: waiting on tokens and a timer.
                        () = c.released.cancelled() => true,
                        () = c.held.cancelled() => false,
                        () = sleep_until(limit) => false,
                    };
                    if !released {
                        return Err(LegFailure::ChildNotRunning);
                    }
                }
            }
        }
    }

    /// Spawns the next generation (state locked, admission just rechecked).
    fn spawn_locked(self: &Arc<Self>, st: &mut State) -> Result<Arc<Child>, LegFailure> {
        let generation = st.generation + 1;
        // A verdict of the gateway's own probe holds for one child life: each new child
        // is probed again (its `initialize` runs no tool), unless configured.
        st.discovered = self.settings.session.configured_pass_through();
        match child::spawn(self, generation, st.discovered) {
            Ok(c) => {
                if st.generation > 0 {
                    self.metrics.stdio_restarted(&self.channel);
                }
                st.generation = generation;
                st.child = Some(c.clone());
                if st.discovered {
                    self.metrics.stdio_up(&self.channel, true);
                }
                tracing::info!(channel = %self.channel, generation, pid = c.pid(), pgid = c.pgid(), "stdio child started");
                Ok(c)
            }
            Err(e) => {
                st.failures = backoff::failures_after_exit(st.failures, Duration::ZERO);
                let wait = backoff::restart_delay(
                    st.failures,
                    self.settings.restart_backoff_min,
                    self.settings.restart_backoff_max,
                );
                st.next_spawn_at = Some(Instant::now() + wait);
                if crate::descriptors::is_exhaustion(&e) {
                    tracing::warn!(channel = %self.channel, error = %e, retry_in_ms = wait.as_millis() as u64, "stdio child could not be started: {}", crate::descriptors::EXHAUSTION_WORDS);
                    return Err(LegFailure::LocalExhaustion);
                }
                tracing::warn!(channel = %self.channel, error = %e, retry_in_ms = wait.as_millis() as u64, "stdio child could not be started");
                Err(LegFailure::ChildNotRunning)
            }
        }
    }

    /// The monitor saw the child's exit (or `wait` failed).
    pub(super) fn child_exited(&self, child: &Child, status: &std::io::Result<std::process::ExitStatus>) {
        let now = Instant::now();
        // A child whose handshake failed never served: its end counts as a short life,
        // so the restart backoff grows however long the handshake took.
        let lived = if child.opening_failed() {
            Duration::ZERO
        } else {
            now.saturating_duration_since(child.spawned_at)
        };
        let (expected, retry_in) = {
            let mut st = self.lock();
            let retry_in = if st.stopped {
                None
            } else {
                st.failures = backoff::failures_after_exit(st.failures, lived);
                let wait = backoff::restart_delay(
                    st.failures,
                    self.settings.restart_backoff_min,
                    self.settings.restart_backoff_max,
                );
                st.next_spawn_at = Some(now + wait);
                Some(wait)
            };
            (st.stopped || child.killed.is_cancelled(), retry_in)
        };
        self.metrics.stdio_up(&self.channel, false);
        let lived_ms = lived.as_millis() as u64;
        let retry_in_ms = retry_in.map(|d| d.as_millis() as u64);
        match status {
            Ok(s) if expected => {
                tracing::info!(channel = %self.channel, generation = child.generation, status = %s, lived_ms, "stdio child exited")
            }
            Ok(s) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, status = %s, lived_ms, ?retry_in_ms, "stdio child exited; a new one starts after the restart backoff")
            }
            Err(e) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, error = %e, "waiting for the stdio child failed; treating it as exited")
            }
        }
        child.exited.cancel();
    }

    /// The child is reaped and its stdout closed: a new one may start.
    pub(super) fn child_released(&self, child: &Arc<Child>) {
        {
            let mut st = self.lock();
            if st.child.as_ref().is_some_and(|c| Arc::ptr_eq(c, child)) {
                st.child = None;
            }
        }
        if child.held.is_cancelled() {
            tracing::info!(channel = %self.channel, generation = child.generation, "held stdio child reaped; a new child may start");
        }
        child.released.cancel();
    }

    /// Reported once per child: it outlived SIGKILL, so nothing new starts until it is reaped.
    pub(super) fn report_held(&self, child: &Child, reason: &'static str) {
        if child.held.is_cancelled() {
            return;
        }
        child.held.cancel();
        tracing::error!(channel = %self.channel, generation = child.generation, pid = child.pid(), reason, "stdio child outlived SIGKILL: held until reaped; no new child starts meanwhile");
    }
}
