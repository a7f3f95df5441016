//! Background tasks that are never left to die silently.
//!
//! Every long-lived or per-command task is spawned through a [`Supervisor`]: a panic, or
//! an end its owner calls unexpected ([`TaskEnd::Unexpected`]), is logged once and handed
//! to the failure hook the gateway installs (strict mode latches `internal_error`;
//! default mode turns not ready with the reason and counts it). Tracked tasks are on the
//! gateway's `TaskTracker`, so the stop order waits for them.
//!
//! Imports only `telemetry` (the ground floor): any module may use it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub use crate::telemetry::TaskKind;

/// How a supervised task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// Its work is done (or it was asked to stop).
    Finished,
    /// It ended while it was still needed; the reason is a fixed phrase.
    Unexpected(&'static str),
}

/// Told of each task that panicked or ended unexpectedly: the task and a fixed phrase.
pub type FailureHook = Arc<dyn Fn(TaskKind, &'static str) + Send + Sync>;

/// Spawns and watches tasks. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    tracker: TaskTracker,
    on_failure: FailureHook,
}

impl Supervisor {
    pub fn new(tracker: TaskTracker, on_failure: FailureHook) -> Self {
        Self { tracker, on_failure }
    }

    /// A supervisor whose failures are only logged (tests, stand-alone transports).
    pub fn logging_only() -> Self {
        Self::new(TaskTracker::new(), Arc::new(|_, _| {}))
    }

    /// Spawns `task` on the tracker (the stop order waits for it).
    pub fn spawn<F>(&self, kind: TaskKind, task: F) -> JoinHandle<()>
    where
        F: Future<Output = TaskEnd> + Send + 'static,
    {
        self.tracker.spawn(self.watched(kind, task))
    }

    /// Spawns `task` outside the tracker: for tasks that idle until the very end and must
    /// not hold up a drain. Still watched.
    pub fn spawn_untracked<F>(&self, kind: TaskKind, task: F) -> JoinHandle<()>
    where
        F: Future<Output = TaskEnd> + Send + 'static,
    {
        tokio::spawn(self.watched(kind, task))
    }

    /// `task`, watched but not spawned: the caller drives it inside its own task (saving a
    /// spawn where the work belongs to one command anyway). A panic or an unexpected end is
    /// logged and reported as `kind`'s, exactly as for a spawned task, and the returned
    /// future completes either way.
    pub fn watched<F>(&self, kind: TaskKind, task: F) -> impl Future<Output = ()> + Send + 'static
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
        (Supervisor::new(TaskTracker::new(), hook), seen)
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
}
