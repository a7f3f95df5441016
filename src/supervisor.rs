//! Background tasks that are never left to die silently, and never left running unseen.
//!
//! Every task of the gateway is spawned through a [`Supervisor`]. A watched task's panic,
//! or an end its owner calls unexpected ([`TaskEnd::Unexpected`]), is logged once and
//! handed to the failure hook the gateway installs (strict mode latches `internal_error`;
//! default mode turns not ready with the reason and counts it). A joined task
//! ([`Supervisor::spawn_joined`], [`Supervisor::spawn_blocking`]) hands its result, or its
//! panic, to the caller that awaits its handle.
//!
//! Two sets of tasks, each joined at stop:
//! - *drained* tasks ([`Supervisor::spawn`]: commands, the poller, the warm-up): the stop
//!   order closes the set ([`Supervisor::close`]) and waits for it to empty
//!   ([`Supervisor::drained`]) within its own bounds;
//! - *background* tasks (everything else: the admitter, the ops listener, a stdio child's
//!   monitor, reader, stderr logger and writes, the latch write): they idle until the very
//!   end and must not hold up a drain; the run joins them last, with a bound
//!   ([`Supervisor::join_background`]). What is still running then is dropped with the
//!   runtime.
//!
//! Imports only `telemetry` (the ground floor): every module above floor 0 may use it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub(crate) use crate::telemetry::TaskKind;

/// How a supervised task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskEnd {
    /// Its work is done (or it was asked to stop).
    Finished,
    /// It ended while it was still needed; the reason is a fixed phrase.
    Unexpected(&'static str),
}

/// Told of each task that panicked or ended unexpectedly: the task and a fixed phrase.
pub(crate) type FailureHook = Arc<dyn Fn(TaskKind, &'static str) + Send + Sync>;

/// Spawns, watches and joins tasks. Cheap to clone; clones share the task sets.
#[derive(Clone)]
pub struct Supervisor {
    /// Drained by the stop order.
    drained: TaskTracker,
    /// Joined last, with a bound.
    background: TaskTracker,
    on_failure: FailureHook,
}

impl Supervisor {
    pub(crate) fn new(on_failure: FailureHook) -> Self {
        Self {
            drained: TaskTracker::new(),
            background: TaskTracker::new(),
            on_failure,
        }
    }

    /// A supervisor whose failures are only logged (tests, stand-alone transports).
    pub fn logging_only() -> Self {
        Self::new(Arc::new(|_, _| {}))
    }

    /// Spawns `task` among the drained tasks (the stop order waits for it).
    pub(crate) fn spawn<F>(&self, kind: TaskKind, task: F) -> JoinHandle<()>
    where
        F: Future<Output = TaskEnd> + Send + 'static,
    {
        self.drained.spawn(self.watched(kind, task))
    }

    /// Spawns `task` among the background tasks: for tasks that idle until the very end
    /// and must not hold up a drain. Still watched, and joined by
    /// [`join_background`](Self::join_background).
    pub(crate) fn spawn_untracked<F>(&self, kind: TaskKind, task: F) -> JoinHandle<()>
    where
        F: Future<Output = TaskEnd> + Send + 'static,
    {
        self.background.spawn(self.watched(kind, task))
    }

    /// Spawns `task` among the background tasks for a caller that awaits its handle: the
    /// result, or a panic as a `JoinError`, is the caller's to act on (nothing is handed
    /// to the failure hook). Joined by [`join_background`](Self::join_background) too.
    pub fn spawn_joined<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn(task)
    }

    /// Runs the blocking `work` off the runtime's workers, among the background tasks; as
    /// for [`spawn_joined`](Self::spawn_joined), the caller awaits the handle.
    pub fn spawn_blocking<F, T>(&self, work: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.background.spawn_blocking(work)
    }

    /// Closes the drained set: [`drained`](Self::drained) completes once it is empty.
    /// Tasks may still be spawned into it (a command's own follow-ups).
    pub(crate) fn close(&self) {
        self.drained.close();
    }

    /// Completes when the drained set is closed and empty. The stop order bounds it.
    ///
    /// # Cancel safety
    ///
    /// Waiting only: dropping the future changes nothing.
    pub(crate) fn drained(&self) -> impl Future<Output = ()> + Send + '_ {
        self.drained.wait()
    }

    /// The last join of a run: closes the background set and waits up to `bound` for it
    /// to empty. `true` when every background task ended in time.
    pub(crate) async fn join_background(&self, bound: Duration) -> bool {
        self.background.close();
        tokio::time::timeout(bound, self.background.wait()).await.is_ok()
    }

    /// `task`, watched but not spawned: the caller drives it inside its own task (saving a
    /// spawn where the work belongs to one command anyway). A panic or an unexpected end is
    /// logged and reported as `kind`'s, exactly as for a spawned task, and the returned
    /// future completes either way.
    pub(crate) fn watched<F>(&self, kind: TaskKind, task: F) -> impl Future<Output = ()> + Send + 'static
    where
        F: Future<Output = TaskEnd> + Send + 'static,
    {
        let on_failure = self.on_failure.clone();
        // On the heap at once: a command's future holds every state of its lifecycle (tens
        // of KiB); boxed, the wrappers and the runtime move a pointer instead of copying it.
        let task = Box::pin(task);
        async move {
            let why = match AssertUnwindSafe(task).catch_unwind().await {
                Ok(TaskEnd::Finished) => return,
                Ok(TaskEnd::Unexpected(why)) => why,
                Err(_) => "panicked",
            };
            tracing::error!(
                task = kind.as_str(),
                reason = why,
                "a background task ended unexpectedly"
            );
            on_failure(kind, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type Seen = Arc<Mutex<Vec<(TaskKind, &'static str)>>>;

    fn recording() -> (Supervisor, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook = {
            let seen = seen.clone();
            Arc::new(move |k, why| seen.lock().unwrap().push((k, why))) as FailureHook
        };
        (Supervisor::new(hook), seen)
    }

    #[tokio::test]
    async fn a_task_that_finishes_reports_nothing() {
        let (sup, seen) = recording();
        sup.spawn(TaskKind::Poller, async { TaskEnd::Finished }).await.unwrap();
        assert!(seen.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_panic_and_an_unexpected_end_are_each_reported_once_with_the_task() {
        let (sup, seen) = recording();
        sup.spawn(TaskKind::Notifier, async { panic!("boom") }).await.unwrap();
        sup.spawn_untracked(TaskKind::Admitter, async { TaskEnd::Unexpected("channel closed") })
            .await
            .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(TaskKind::Notifier, "panicked"), (TaskKind::Admitter, "channel closed")]
        );
    }

    #[tokio::test]
    async fn a_joined_task_hands_its_result_and_its_panic_to_the_caller_not_the_hook() {
        let (sup, seen) = recording();
        assert_eq!(sup.spawn_joined(async { 7 }).await.unwrap(), 7);
        assert!(sup.spawn_joined(async { panic!("boom") }).await.unwrap_err().is_panic());
        assert_eq!(sup.spawn_blocking(|| 8).await.unwrap(), 8);
        assert!(seen.lock().unwrap().is_empty(), "the caller acts on the end");
    }

    #[tokio::test(start_paused = true)]
    async fn the_drain_waits_for_drained_tasks_only_and_only_once_closed() {
        let (sup, _) = recording();
        let release = tokio_util::sync::CancellationToken::new();
        sup.spawn(TaskKind::Command, {
            let release = release.clone();
            async move {
                release.cancelled().await;
                TaskEnd::Finished
            }
        });
        sup.spawn_untracked(TaskKind::Admitter, std::future::pending::<TaskEnd>());
        sup.close();
        let bound = Duration::from_secs(5);
        assert!(
            tokio::time::timeout(bound, sup.drained()).await.is_err(),
            "a drained task still runs"
        );
        release.cancel();
        assert!(
            tokio::time::timeout(bound, sup.drained()).await.is_ok(),
            "a background task does not hold up the drain"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_join_is_bounded_and_says_whether_everything_ended() {
        let (sup, _) = recording();
        let release = tokio_util::sync::CancellationToken::new();
        sup.spawn_untracked(TaskKind::OpsListener, {
            let release = release.clone();
            async move {
                release.cancelled().await;
                TaskEnd::Finished
            }
        });
        let started = tokio::time::Instant::now();
        assert!(!sup.join_background(Duration::from_secs(1)).await, "still running");
        assert_eq!(started.elapsed(), Duration::from_secs(1), "waited exactly the bound");
        release.cancel();
        assert!(sup.join_background(Duration::from_secs(1)).await);
    }
}
