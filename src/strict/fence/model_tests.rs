//! Model checks of the fence with shuttle: the real [`Fence`] code, built on shuttle's
//! primitives through [`FenceSync`], run under the interleavings shuttle's schedulers
//! choose. Every lock, permit and atomic operation of the fence is a point where shuttle
//! may switch tasks, so the windows a multi-threaded runtime opens (between a latch's state
//! update and the semaphore's close, between a check and a send) are explored.
//!
//! What is checked, over the fence's ghost history (its decisions in the order its lock
//! serialised them) and over what the tasks saw:
//! - no admission after the latch, and no step of an admission allowed after it
//!   (`recheck`, `begin_send`, `Wire::connected` after a latch always refuse);
//! - the latch reports once, whoever latches and however many try;
//! - a strict stop racing a latch ends in exactly one outcome: a stop that found the run
//!   clean stays clean (nothing latches later, no request left unacknowledged), a fatal
//!   one is latched and reported once;
//! - a released permit admits exactly one waiter: strict admissions alternate with
//!   releases and every waiter is served (receipt order through the admitter is checked in
//!   `dispatch/lifecycle/model_tests.rs`).
//!
//! Shuttle explores at random (it is not exhaustive like loom): each check runs the PCT
//! scheduler (bug depth 3) and the uniform random scheduler from fixed seeds, so CI is
//! deterministic and a failure prints a schedule that `shuttle::replay` reproduces.
//! `TUNNELGATE_MODEL_ITERATIONS` raises the per-scheduler budget (default 2000) for a
//! deeper run; docs/RELIABILITY.md records the timings and what was found.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use shuttle::future::batch_semaphore::{BatchSemaphore, Fairness};
use shuttle::scheduler::{PctScheduler, RandomScheduler};

use super::{Admission, Decision, Fence, FenceSync, Refusal};
use crate::strict::{CommandRef, FatalCategory};

/// The fence on shuttle's primitives: a fair semaphore like tokio's, shuttle's mutex and
/// atomics (each operation a scheduling point).
enum ShuttleSync {}

/// A permit of the model's semaphore, released when dropped (like tokio's owned permit).
struct ShuttlePermit(Arc<BatchSemaphore>);

impl Drop for ShuttlePermit {
    fn drop(&mut self) {
        self.0.release(1);
    }
}

impl FenceSync for ShuttleSync {
    type Mutex<T: Send> = shuttle::sync::Mutex<T>;
    type Guard<'a, T: Send + 'a> = shuttle::sync::MutexGuard<'a, T>;
    type Semaphore = BatchSemaphore;
    type Permit = ShuttlePermit;
    type Cell = shuttle::sync::atomic::AtomicU8;

    fn mutex<T: Send>(value: T) -> Self::Mutex<T> {
        shuttle::sync::Mutex::new(value)
    }

    fn lock<T: Send>(mutex: &Self::Mutex<T>) -> Self::Guard<'_, T> {
        mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn semaphore(permits: usize) -> Arc<Self::Semaphore> {
        Arc::new(BatchSemaphore::new(permits, Fairness::StrictlyFair))
    }

    async fn acquire(semaphore: Arc<Self::Semaphore>) -> Option<Self::Permit> {
        let acquired = semaphore.acquire(1).await.is_ok();
        acquired.then(|| ShuttlePermit(semaphore))
    }

    fn close(semaphore: &Self::Semaphore) {
        semaphore.close();
    }

    super::sync::atomic_u8_cell!(shuttle::sync::atomic::AtomicU8);
}

type ModelFence = Fence<ShuttleSync>;
type ModelAdmission = Admission<ShuttleSync>;

impl<S: FenceSync> Fence<S> {
    /// The ghost history: every decision, in lock order.
    fn history(&self) -> Vec<Decision> {
        self.inner.lock().history.clone()
    }
}

/// Executions per scheduler.
fn iterations() -> usize {
    std::env::var("TUNNELGATE_MODEL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

const SEED: u64 = 0x7e11_9a7e;

/// Runs `scenario` under PCT (bug depth 3) and under uniform random scheduling, each for
/// [`iterations`] executions from a fixed seed.
pub(crate) fn explore<F>(scenario: F)
where
    F: Fn() + Send + Sync + Clone + 'static,
{
    let n = iterations();
    let config = shuttle::Config::default;
    let pct = shuttle::Runner::new(PctScheduler::new_from_seed(SEED, 3, n), config()).run(scenario.clone());
    let random = shuttle::Runner::new(RandomScheduler::new_from_seed(SEED, n), config()).run(scenario);
    assert_eq!((pct, random), (n, n), "every planned execution ran");
}

fn cmd(id: &str) -> CommandRef {
    CommandRef::new(id, "main", Some("tools/call"))
}

/// A fence that counts how often a latch was reported.
fn observed_fence() -> (ModelFence, Arc<AtomicUsize>) {
    let fence = ModelFence::with_sync(true, 1);
    let reports = Arc::new(AtomicUsize::new(0));
    let counter = reports.clone();
    fence.observe_latches(Box::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    (fence, reports)
}

/// The fence-wide properties every scenario must keep, read from the ghost history.
fn assert_history_invariants(history: &[Decision]) {
    let latched_at = history.iter().position(|d| *d == Decision::Latched);
    assert!(
        history.iter().filter(|d| **d == Decision::Latched).count() <= 1,
        "the latch was set twice: {history:?}"
    );
    if let Some(at) = latched_at {
        for later in &history[at..] {
            assert!(
                !matches!(later, Decision::Admitted { .. }),
                "an admission was granted after the latch: {history:?}"
            );
            assert!(
                *later != Decision::StepAllowed,
                "a step was allowed after the latch: {history:?}"
            );
        }
    }
    // Strict: one holder at a time; each release is followed by at most one admission.
    let mut holding = None;
    for d in history {
        match *d {
            Decision::Admitted { ticket } => {
                assert_eq!(holding, None, "admitted while another held the permit: {history:?}");
                holding = Some(ticket);
            }
            Decision::Released { ticket } => {
                assert_eq!(holding, Some(ticket), "released what it did not hold: {history:?}");
                holding = None;
            }
            _ => {}
        }
    }
}

/// One admitted command's downstream steps, as the transports take them.
async fn take_steps(admission: &ModelAdmission) -> Result<(), Refusal> {
    admission.recheck()?;
    admission.begin_send()
}

#[test]
fn no_admission_or_step_is_allowed_after_a_latch_whoever_latches() {
    for holder_latches in [false, true] {
        explore(move || {
            shuttle::future::block_on(async move {
                let (fence, reports) = observed_fence();
                let holder = fence.admit(cmd("h")).await.expect("the first admission");
                let mut tasks = Vec::new();
                tasks.push(shuttle::future::spawn(async move {
                    let _ = take_steps(&holder).await;
                    if holder_latches {
                        holder.latch(FatalCategory::AckTimeout);
                        // After its own latch, a holder's every step is refused.
                        assert_eq!(holder.recheck(), Err(Refusal::Latched));
                        assert_eq!(holder.begin_send(), Err(Refusal::Latched));
                        assert_eq!(holder.wire().connected(), Err(Refusal::Latched));
                    }
                }));
                for name in ["w1", "w2"] {
                    let fence = fence.clone();
                    tasks.push(shuttle::future::spawn(async move {
                        match fence.admit(cmd(name)).await {
                            Ok(admission) => {
                                let _ = take_steps(&admission).await;
                            }
                            Err(refusal) => assert_eq!(refusal, Refusal::Latched),
                        }
                    }));
                }
                {
                    // The task-failure hook: a latch from outside, by no holder.
                    let fence = fence.clone();
                    tasks.push(shuttle::future::spawn(async move {
                        fence.latch(FatalCategory::InternalError, &CommandRef::default());
                        assert_eq!(fence.admit(cmd("late")).await.err(), Some(Refusal::Latched));
                    }));
                }
                for task in tasks {
                    task.await.expect("no task panicked");
                }
                assert_history_invariants(&fence.history());
                assert!(fence.fatal().is_some());
                assert_eq!(reports.load(Ordering::SeqCst), 1, "the latch is reported exactly once");
            });
        });
    }
}

/// How an admitted request reaches the server (the three paths the transports take).
#[derive(Clone, Copy, Debug)]
enum SendPath {
    /// stdio: `begin_send` right before the write.
    Stdio,
    /// HTTP on a new connection: the connector reports connecting, then connected.
    HttpNewConnection,
    /// HTTP on a pooled connection: the request may leave during the first poll, with no
    /// word from the connector.
    HttpPooled,
    /// The pooled path as it was before `Wire::hand_over`: a `recheck`, then the hand-over.
    /// Kept to show that the model finds the race it had (see the `should_panic` test).
    HttpPooledUnfenced,
}

/// What a stop decided, as `app::graceful_stop` decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopOutcome {
    Clean,
    Fatal,
}

/// The request's fate, as ghost flags set where the real code would act.
#[derive(Default)]
struct Fate {
    /// Bytes of the request may have left for the MCP server.
    left: AtomicBool,
    /// Its terminal response was acknowledged.
    acked: AtomicBool,
    /// The command's task finished (the stop's tracker would see it drained).
    done: AtomicBool,
}

/// One admitted command on `path`, as `http::send` / the stdio writer and then the
/// lifecycle treat it: a request that may have left and gets no acknowledgement latches.
async fn run_command(admission: ModelAdmission, path: SendPath, acked: bool, fate: &Fate) {
    let sent = match path {
        SendPath::Stdio => admission.begin_send().is_ok(),
        SendPath::HttpNewConnection => {
            let wire = admission.wire();
            if wire.hand_over().is_ok() {
                wire.connecting(); // the first poll starts a connect
                wire.handed_over();
                shuttle::future::yield_now().await; // the connect is in flight
                wire.connected().is_ok()
            } else {
                false
            }
        }
        SendPath::HttpPooled => {
            let wire = admission.wire();
            if wire.hand_over().is_ok() {
                // The first poll gives the request to a pooled connection: it may leave
                // now, before `handed_over` reports it.
                fate.left.store(true, Ordering::SeqCst);
                wire.handed_over();
                true
            } else {
                false
            }
        }
        SendPath::HttpPooledUnfenced => {
            if admission.recheck().is_ok() {
                fate.left.store(true, Ordering::SeqCst);
                admission.wire().handed_over();
                true
            } else {
                false
            }
        }
    };
    if sent {
        fate.left.store(true, Ordering::SeqCst);
        if acked {
            fate.acked.store(true, Ordering::SeqCst);
        } else {
            admission.latch(FatalCategory::AckTimeout);
        }
    }
    drop(admission);
    fate.done.store(true, Ordering::SeqCst);
}

/// `app::graceful_stop` in strict mode, reduced to its fence decisions.
async fn graceful_stop(fence: &ModelFence, fate: &Fate) -> StopOutcome {
    fence.stop_admitting();
    shuttle::future::yield_now().await; // the grace, or a second stop request
    let drained = fate.done.load(Ordering::SeqCst);
    if !drained && fence.fatal().is_none() {
        let _ = fence.latch_if_sent_on_stop();
    }
    if fence.fatal().is_some() {
        StopOutcome::Fatal
    } else {
        StopOutcome::Clean
    }
}

#[test]
fn a_stop_racing_a_latch_ends_in_exactly_one_outcome() {
    for path in [SendPath::Stdio, SendPath::HttpNewConnection, SendPath::HttpPooled] {
        for acked in [false, true] {
            stop_races_command(path, acked);
        }
    }
}

/// The race the model found in the HTTP transport: checked with `recheck` and handed to a
/// pooled connection a step later, a request could leave after a stop had found nothing
/// sent and ended clean, and then latch: two outcomes. `Wire::hand_over` closed it.
#[test]
#[should_panic(expected = "HttpPooledUnfenced: the stop ended clean")]
fn the_model_finds_the_race_of_a_pooled_hand_over_checked_a_step_early() {
    stop_races_command(SendPath::HttpPooledUnfenced, false);
}

/// A command admitted on `path` (acknowledged or not) against a graceful stop.
fn stop_races_command(path: SendPath, acked: bool) {
    explore(move || {
        shuttle::future::block_on(async move {
            let (fence, reports) = observed_fence();
            let fate = Arc::new(Fate::default());
            let admission = fence.admit(cmd("a")).await.expect("the first admission");
            let command = shuttle::future::spawn({
                let fate = fate.clone();
                async move { run_command(admission, path, acked, &fate).await }
            });
            let stop = shuttle::future::spawn({
                let (fence, fate) = (fence.clone(), fate.clone());
                async move { graceful_stop(&fence, &fate).await }
            });
            command.await.expect("the command finished");
            let outcome = stop.await.expect("the stop finished");

            let fatal = fence.fatal().is_some();
            let unacknowledged = fate.left.load(Ordering::SeqCst) && !fate.acked.load(Ordering::SeqCst);
            match outcome {
                StopOutcome::Clean => {
                    assert!(!fatal, "{path:?}: the stop ended clean, then the run latched");
                    assert!(
                        !unacknowledged,
                        "{path:?}: the stop ended clean while a request may have reached the server unacknowledged"
                    );
                }
                StopOutcome::Fatal => assert!(fatal),
            }
            assert_eq!(
                reports.load(Ordering::SeqCst),
                usize::from(fatal),
                "{path:?}: a latch is reported exactly once"
            );
            assert_history_invariants(&fence.history());
        });
    });
}

#[test]
fn a_released_permit_admits_exactly_one_waiter_and_every_waiter_is_served() {
    explore(|| {
        shuttle::future::block_on(async {
            let fence = ModelFence::with_sync(true, 1);
            let holder = fence.admit(cmd("h")).await.expect("the first admission");
            let served = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for name in ["w1", "w2", "w3"] {
                let (fence, served) = (fence.clone(), served.clone());
                tasks.push(shuttle::future::spawn(async move {
                    let admission = fence.admit(cmd(name)).await.expect("no latch, no stop");
                    served.lock().expect("ghost").push(name);
                    shuttle::future::yield_now().await;
                    drop(admission);
                }));
            }
            shuttle::future::yield_now().await;
            drop(holder);
            for task in tasks {
                task.await.expect("no task panicked");
            }
            let history = fence.history();
            assert_history_invariants(&history);
            let admitted = history
                .iter()
                .filter(|d| matches!(d, Decision::Admitted { .. }))
                .count();
            assert_eq!(admitted, 4, "every waiter was served: {history:?}");
            assert_eq!(served.lock().expect("ghost").len(), 3);
        });
    });
}

#[test]
fn a_default_fence_never_admits_more_than_its_permits() {
    explore(|| {
        shuttle::future::block_on(async {
            let fence = ModelFence::with_sync(false, 2);
            let inside = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for name in ["a", "b", "c", "d"] {
                let (fence, inside) = (fence.clone(), inside.clone());
                tasks.push(shuttle::future::spawn(async move {
                    let admission = fence.admit(cmd(name)).await.expect("no latch, no stop");
                    assert!(
                        inside.fetch_add(1, Ordering::SeqCst) < 2,
                        "a third concurrent admission"
                    );
                    shuttle::future::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(admission);
                }));
            }
            for task in tasks {
                task.await.expect("no task panicked");
            }
        });
    });
}
