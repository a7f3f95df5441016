//! The two stop orders of a run: a pure state machine ([`Phase::next`]: phase x event ->
//! next phase and action) and the thin driver ([`StopOrder`]) that waits, observes and
//! acts.
//!
//! Graceful: stop polling (an answered poll's body is still read) -> refuse new
//! admissions (queued commands get a "not executed" answer; in strict mode an admitted
//! command that has sent nothing may not start sending) -> give in-flight commands
//! `strict.shutdown_grace` -> at its end or on a second stop request (strict: latch
//! `stopped_before_ack` only if the fence holder's request may have reached an MCP server)
//! cut the legs still running: each is answered within `strict.cleanup_timeout` ("not
//! delivered; safe to retry" if nothing left, "effect unknown" otherwise) -> hard stop
//! what remains -> stop stdio children. The run then stops the ops listener.
//!
//! Fatal: stop polling -> kill stdio groups and drop HTTP connections -> persist the latch
//! file (off the runtime) -> let refused commands post "not executed" within
//! `strict.cleanup_timeout` -> cut and hard stop the rest -> return the cause. The latch
//! itself has already reported the cause (stderr, event, metrics) when it was set.
//!
//! Fatal beats a clean stop until the cut: a latch seen while running, during the grace or
//! at its end turns the order fatal. From the cut on, the graceful order runs to its end,
//! and a latch set meanwhile is persisted and returned at that end: a run that latched
//! never reads as clean.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::RunOutcome;
use crate::config::Config;
use crate::downstream::Channels;
use crate::health::Health;
use crate::strict::{latch_file, Fatal, Fence};
use crate::supervisor::Supervisor;

/// After the hard stop, how long the stop still waits for the tasks it cut: each is
/// expected to end at once, so this only absorbs their last steps.
const LAST_WAIT: Duration = Duration::from_millis(500);

/// Where a stop stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Neither a stop request nor a latch yet.
    Running,
    /// Graceful: polling stopped, admissions refused; in-flight commands have the grace.
    Grace,
    /// Graceful: the grace ran out, or a second request cut it short, with commands
    /// unfinished; strict mode checks whether the fence holder may have sent.
    GraceOver,
    /// Graceful: the legs still running are cut; each is answered within the cleanup time.
    Cut,
    /// Graceful: the cleanup time ran out; everything stops now, a last short wait.
    HardStop,
    /// Fatal: the latch is set; refused commands post "not executed" within the cleanup
    /// time (counted from when the stop saw the latch).
    Fatal,
    /// Fatal: the cleanup time ran out; the cut and the hard stop fire, a last short wait.
    FatalHardStop,
    /// The stop is over. Absorbs every event.
    Done(End),
}

/// How a stop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Clean,
    Fatal,
}

/// What the driver saw while in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// A stop request: the first one, or a second one ("now").
    StopRequested,
    /// The fence is latched.
    Latched,
    /// Every drained task has ended.
    Drained,
    /// The phase's time bound ran out.
    TimeUp,
    /// The check at the end of the grace left the fence unlatched.
    Unlatched,
}

/// What the driver does on entering the next phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Nothing: the event does not move this phase.
    None,
    /// Turn draining, stop polling, refuse admissions, close the drained set; the grace
    /// starts.
    BeginGrace,
    /// Strict mode: latch `stopped_before_ack` if the fence holder may have sent.
    LatchIfSent,
    /// Fire the cut: every command finished within the grace. The cleanup time starts.
    Cut,
    /// Warn of the unfinished commands and fire the cut. The cleanup time starts.
    WarnAndCut,
    /// Fire the hard stop. The last wait starts.
    HardStop,
    /// Fire the hard stop (again, harmlessly), stop the channels, report a clean stop.
    FinishClean,
    /// Stop polling, kill the channels, persist the latch, close the drained set. The
    /// cleanup time starts.
    BeginFatal,
    /// Fire the cut and the hard stop. The last wait starts.
    FatalHardStop,
}

impl Phase {
    /// The stop order. Exhaustive by design: each ignored pair says why.
    pub(super) fn next(self, event: Event) -> (Phase, Action) {
        use Action as A;
        use Event as E;
        use Phase as P;
        match (self, event) {
            (P::Running, E::StopRequested) => (P::Grace, A::BeginGrace),
            (P::Running | P::Grace | P::GraceOver, E::Latched) => (P::Fatal, A::BeginFatal),
            (P::Grace, E::Drained) => (P::Cut, A::Cut),
            (P::Grace, E::StopRequested | E::TimeUp) => (P::GraceOver, A::LatchIfSent),
            (P::GraceOver, E::Unlatched) => (P::Cut, A::WarnAndCut),
            (P::Cut, E::Drained) => (P::Done(End::Clean), A::FinishClean),
            (P::Cut, E::TimeUp) => (P::HardStop, A::HardStop),
            (P::HardStop, E::Drained | E::TimeUp) => (P::Done(End::Clean), A::FinishClean),
            (P::Fatal, E::Drained) => (P::Done(End::Fatal), A::None),
            (P::Fatal, E::TimeUp) => (P::FatalHardStop, A::FatalHardStop),
            (P::FatalHardStop, E::Drained | E::TimeUp) => (P::Done(End::Fatal), A::None),
            // Running waits only for a request or the latch; the grace's own check
            // reports only its result.
            (P::Running, E::Drained | E::TimeUp | E::Unlatched)
            | (P::Grace, E::Unlatched)
            | (P::GraceOver, E::StopRequested | E::Drained | E::TimeUp)
            // From the cut on, and once fatal, the order runs to its end: a further
            // request or latch changes nothing.
            | (P::Cut | P::HardStop | P::Fatal | P::FatalHardStop, E::StopRequested | E::Latched | E::Unlatched)
            | (P::Done(_), _) => (self, A::None),
        }
    }
}

/// The bounds of a stop, from `[strict]`.
#[derive(Clone, Debug)]
pub(super) struct StopBounds {
    pub(super) shutdown_grace: Duration,
    pub(super) cleanup_timeout: Duration,
    pub(super) latch_file: PathBuf,
}

impl StopBounds {
    pub(super) fn of(config: &Config) -> Self {
        Self {
            shutdown_grace: config.strict.shutdown_grace,
            cleanup_timeout: config.strict.cleanup_timeout,
            latch_file: config.strict.latch_file.clone(),
        }
    }
}

/// The run's stop signals, in the order the stop fires them.
pub(super) struct StopSignals {
    /// Parent of the three below; cancelled when the run ends.
    root: CancellationToken,
    pub(super) poll_stop: CancellationToken,
    pub(super) cut: CancellationToken,
    pub(super) hard_stop: CancellationToken,
}

impl StopSignals {
    pub(super) fn new() -> Self {
        let root = CancellationToken::new();
        Self {
            poll_stop: root.child_token(),
            cut: root.child_token(),
            hard_stop: root.child_token(),
            root,
        }
    }

    /// The run is over: whatever still listens stops.
    pub(super) fn end(&self) {
        self.root.cancel();
    }
}

/// The driver: waits for each phase's events, feeds them to [`Phase::next`], acts.
pub(super) struct StopOrder {
    pub(super) bounds: StopBounds,
    pub(super) fence: Fence,
    pub(super) channels: Channels,
    pub(super) health: Arc<Health>,
    pub(super) supervisor: Supervisor,
    pub(super) signals: StopSignals,
    /// Stop requests (a [`StopHandle`](super::StopHandle)'s).
    pub(super) requests: mpsc::UnboundedReceiver<()>,
    /// Strict mode across replicas: where the latch is published for every replica.
    pub(super) cluster: Option<crate::coord::Coordinator>,
}

/// What the driver keeps between phases.
struct Progress {
    /// The current phase's time bound.
    deadline: Instant,
    /// The cause, once the fatal order began.
    fatal: Option<Fatal>,
}

impl StopOrder {
    /// Runs the stop from [`Phase::Running`] to its end, and returns the run's outcome
    /// (the stop signals stay as the order left them).
    /// Also hands back the stop requests still to come: a run that holds on its latch
    /// afterwards is stopped by them.
    pub(super) async fn run(mut self) -> (RunOutcome, StopSignals, mpsc::UnboundedReceiver<()>) {
        let mut progress = Progress {
            deadline: Instant::now(),
            fatal: None,
        };
        let mut phase = Phase::Running;
        let end = loop {
            if let Phase::Done(end) = phase {
                break end;
            }
            let event = self.observe(phase, progress.deadline).await;
            let (next, action) = phase.next(event);
            self.act(action, &mut progress).await;
            phase = next;
        };
        let outcome = match end {
            // A latch set during or after the cut (a task failing in strict mode, say)
            // comes too late to change the order, never too late to win: it is
            // persisted and returned, so the run never reads as clean.
            End::Clean if self.fence.fatal().is_some() => RunOutcome::Fatal(self.persist().await),
            End::Clean => RunOutcome::Clean,
            End::Fatal => RunOutcome::Fatal(
                progress
                    .fatal
                    .expect("the fatal order is entered only through BeginFatal, which records the cause"),
            ),
        };
        (outcome, self.signals, self.requests)
    }

    /// Waits for what `phase` waits for. Never called in [`Phase::Done`].
    async fn observe(&mut self, phase: Phase, deadline: Instant) -> Event {
        match phase {
            Phase::Running => {
                let latched = self.fence.latched_token();
                tokio::select! {
                    biased;
                    // cancel-safe: waiting only.
                    _ = latched.cancelled() => Event::Latched,
                    // cancel-safe: a received stop request is acted on.
                    _ = self.requests.recv() => Event::StopRequested,
                }
            }
            Phase::Grace => {
                let latched = self.fence.latched_token();
                let event = tokio::select! {
                    biased;
                    // cancel-safe: waiting only.
                    _ = latched.cancelled() => Event::Latched,
                    // cancel-safe: a second stop request means "now".
                    _ = self.requests.recv() => Event::StopRequested,
                    // cancel-safe: waiting only.
                    r = tokio::time::timeout_at(deadline, self.supervisor.drained()) => {
                        if r.is_ok() { Event::Drained } else { Event::TimeUp }
                    }
                };
                // A latch at the same moment beats the clean end of the grace.
                if self.fence.fatal().is_some() {
                    Event::Latched
                } else {
                    event
                }
            }
            Phase::GraceOver => {
                if self.fence.fatal().is_some() {
                    Event::Latched
                } else {
                    Event::Unlatched
                }
            }
            Phase::Cut | Phase::HardStop | Phase::Fatal | Phase::FatalHardStop | Phase::Done(_) => {
                match tokio::time::timeout_at(deadline, self.supervisor.drained()).await {
                    Ok(()) => Event::Drained,
                    Err(_) => Event::TimeUp,
                }
            }
        }
    }

    async fn act(&self, action: Action, progress: &mut Progress) {
        let now = Instant::now();
        match action {
            Action::None => {}
            Action::BeginGrace => {
                tracing::info!(
                    in_flight = self.health.in_flight(),
                    queued = self.health.queued(),
                    "stop requested: polling stops, in-flight commands get the grace"
                );
                self.health.set_draining();
                self.signals.poll_stop.cancel();
                self.fence.stop_admitting();
                self.supervisor.close();
                progress.deadline = now + self.bounds.shutdown_grace;
            }
            Action::LatchIfSent => {
                // Strict: only a request that may have reached a server makes the stop
                // fatal; one that sent nothing can no longer start (stopping is set) and
                // is answered after the cut.
                if self.fence.is_strict() {
                    let _ = self.fence.latch_if_sent_on_stop();
                }
            }
            Action::Cut | Action::WarnAndCut => {
                if action == Action::WarnAndCut {
                    tracing::warn!(
                        unfinished = self.health.alive(),
                        in_flight = self.health.in_flight(),
                        "stop: cutting commands that did not finish; each is answered within the cleanup time"
                    );
                }
                self.signals.cut.cancel();
                progress.deadline = now + self.bounds.cleanup_timeout;
            }
            Action::HardStop => {
                self.signals.hard_stop.cancel();
                progress.deadline = now + LAST_WAIT;
            }
            Action::FinishClean => {
                self.signals.hard_stop.cancel();
                self.channels.shutdown().await;
                tracing::info!("stopped cleanly");
            }
            Action::BeginFatal => {
                progress.fatal = Some(self.begin_fatal().await);
                progress.deadline = now + self.bounds.cleanup_timeout;
            }
            Action::FatalHardStop => {
                self.signals.cut.cancel();
                self.signals.hard_stop.cancel();
                progress.deadline = now + LAST_WAIT;
            }
        }
    }

    /// Stops polling, kills the channels, persists the latch and closes the drained set;
    /// returns the cause in force (persisted, when the write succeeded).
    async fn begin_fatal(&self) -> Fatal {
        self.signals.poll_stop.cancel();
        self.channels.kill_all();
        let fatal = self.persist().await;
        self.supervisor.close();
        fatal
    }

    /// Persists the latch in force (off the runtime: the write ends with an fsync) and
    /// returns it, marked persisted when the write succeeded.
    async fn persist(&self) -> Fatal {
        let fatal = self
            .fence
            .fatal()
            .expect("a latch is persisted only once the cause is recorded");
        // The write ends with an fsync: off the runtime, so the cleanup below is not held up.
        let path = self.bounds.latch_file.clone();
        let persisted = self
            .supervisor
            .spawn_blocking({
                let fatal = fatal.clone();
                move || latch_file::write(&path, &fatal)
            })
            .await;
        match persisted {
            Ok(Ok(())) => self.fence.mark_persisted(),
            Ok(Err(e)) => crate::stderr::line(format_args!("{e}; the latch holds for this run only")),
            Err(_) => crate::stderr::line(format_args!(
                "writing the latch file failed; the latch holds for this run only"
            )),
        }
        // Every replica holds on it. Bounded by the etcd request timeout; when it cannot
        // be written, the command's unsettled intent makes the next active latch.
        if let Some(cluster) = &self.cluster {
            if let Err(e) = cluster.publish_latch(&fatal).await {
                crate::stderr::line(format_args!(
                    "the cluster-wide latch could not be written ({e}); the unsettled intent makes the next active latch"
                ));
            }
        }
        self.fence.fatal().unwrap_or(fatal)
    }
}

#[cfg(test)]
mod tests;
