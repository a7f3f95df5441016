//! One line through the child's pipes: the writer every message takes its turn on, the
//! write that runs whole in its own task, and the wait for the answer to a request.
//!
//! Invariants:
//! - one line is written at a time (the writer lock, FIFO), and only while the child is
//!   still usable: a message that waited here while the child died was never written;
//! - a write is never cut short: it runs in the child's task, so a deadline or a dropped
//!   call leaves it to finish; the next writer waits for it (same child) or forgets it
//!   (a newer child);
//! - a write that fails kills the child (a half-written line must never be followed by
//!   another); one that outlives its deadline retires its request, and for `initialize`
//!   kills the child (its session would be in an unknown state);
//! - a request is retired before its timeout is final, so a response routed just before
//!   is still the caller's.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use super::child::{self, Child, Registration};
use super::line::WriteResult;
use super::Shared;
use crate::downstream::LegFailure;

/// How long a call keeps waiting for a response already on its way after the child's exit
/// was seen (the stdout reader may still be draining the pipe).
pub(super) const EXIT_DRAIN: Duration = Duration::from_millis(250);

/// The right to write the next line to the child (held behind [`Shared`]'s writer lock).
#[derive(Default)]
pub(super) struct Writer {
    /// A write that outlived its call's deadline; the next write waits for it.
    pending_write: Option<PendingWrite>,
}

struct PendingWrite {
    generation: u64,
    task: JoinHandle<WriteResult>,
}

/// How waiting for the writer's line ended.
enum WriteWait {
    Idle,
    Finished(WriteResult),
    StillWriting,
}

/// How waiting for the response ended.
pub(super) enum Waited {
    /// The child's answer line, where the pipe id sits in it, and the caller's own id.
    Response(child::Answered),
    Gone,
    TimedOut,
}

impl Shared {
    /// The writer, once an earlier call's write (if any) has finished, and only while
    /// the child is still usable: a request that waited here while the child died was
    /// never written.
    pub(super) async fn writer_for(
        &self,
        child: &Child,
        limit: Instant,
    ) -> Result<tokio::sync::MutexGuard<'_, Writer>, LegFailure> {
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let mut writer = timeout_at(limit, self.writer.lock())
            .await
            .map_err(|_| LegFailure::DeadlineBeforeSend)?;
        // A write that outlived an earlier call must finish before ours starts.
        if writer
            .pending_write
            .as_ref()
            .is_some_and(|p| p.generation != child.generation)
        {
            writer.pending_write = None;
        }
        if let WriteWait::StillWriting = writer.wait_write(limit).await {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        if Instant::now() >= limit {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        if !child.is_usable() {
            return Err(LegFailure::ChildNotRunning);
        }
        Ok(writer)
    }

    /// Waits for the line just started; a failed write kills the child.
    pub(super) async fn finish_write(
        &self,
        child: &Child,
        writer: &mut Writer,
        limit: Instant,
        is_initialize: bool,
    ) -> Result<(), LegFailure> {
        match writer.wait_write(limit).await {
            WriteWait::Finished(WriteResult::Done) => Ok(()),
            WriteWait::Finished(WriteResult::Failed { written, kind }) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, written, error = ?kind, "writing to the stdio child failed: killing it");
                child.abort();
                Err(if written == 0 {
                    LegFailure::ChildNotRunning
                } else {
                    LegFailure::ChildPipeBroken
                })
            }
            WriteWait::Finished(WriteResult::Lost) | WriteWait::Idle => Err(LegFailure::InternalAfterWrite),
            WriteWait::StillWriting => {
                tracing::debug!(channel = %self.channel, generation = child.generation, "deadline passed while writing to the stdio child");
                self.retire_timed_out(child, is_initialize);
                Err(LegFailure::TimeoutAfterWrite)
            }
        }
    }

    /// After a timeout past the write: the child is kept, except for `initialize`, whose
    /// failure leaves the session in an unknown state: that child is killed (fails
    /// closed) and the next call starts a new one.
    pub(super) fn retire_timed_out(&self, child: &Child, is_initialize: bool) {
        if is_initialize {
            tracing::warn!(channel = %self.channel, generation = child.generation, "initialize timed out: killing the stdio child; the next call starts a new one");
            child.abort();
        }
    }
}

/// Waits for the request's answer until `limit`; a child that exits gets
/// [`EXIT_DRAIN`] for the reader to route what it printed before.
///
/// # Cancel safety
/// Cancel-safe: dropping it leaves the registration, whose drop retires the request.
pub(super) async fn wait_answer(child: &Child, registration: &mut Registration, limit: Instant) -> Waited {
    let waited = tokio::select! {
        biased;
        // cancel-safe: a oneshot receiver polled by reference keeps its value.
        response = &mut registration.rx => match response {
            Ok(answered) => Waited::Response(answered),
            Err(_) => Waited::Gone,
        },
        // cancel-safe: waiting on a token.
        () = child.exited.cancelled() => {
            // The reader may still be draining what the child printed before exiting.
            let drain = limit.min(Instant::now() + EXIT_DRAIN);
            match timeout_at(drain, &mut registration.rx).await {
                Ok(Ok(answered)) => Waited::Response(answered),
                _ => Waited::Gone,
            }
        }
        // cancel-safe: a timer.
        () = sleep_until(limit) => Waited::TimedOut,
    };
    match waited {
        Waited::TimedOut => {
            // Retire first, then look: a response routed just before is still ours.
            registration.retire();
            match registration.rx.try_recv() {
                Ok(answered) => Waited::Response(answered),
                Err(_) => Waited::TimedOut,
            }
        }
        other => other,
    }
}

impl Writer {
    /// Starts writing `line` to `child` in its own task and remembers the write, so that
    /// the next writer waits for it. `None` when the child's stdin is closed or busy:
    /// nothing was written.
    pub(super) fn start(&mut self, child: &Arc<Child>, line: Vec<u8>) -> Option<()> {
        let task = child.start_write(line)?;
        self.pending_write = Some(PendingWrite {
            generation: child.generation,
            task,
        });
        Some(())
    }

    /// Waits until `limit` for the write in flight, if any, and forgets it once finished.
    async fn wait_write(&mut self, limit: Instant) -> WriteWait {
        let Some(pending) = self.pending_write.as_mut() else {
            return WriteWait::Idle;
        };
        // cancel-safe: a join handle polled by reference; the write goes on in its task.
        match timeout_at(limit, &mut pending.task).await {
            Ok(joined) => {
                self.pending_write = None;
                WriteWait::Finished(joined.unwrap_or(WriteResult::Lost))
            }
            Err(_) => WriteWait::StillWriting,
        }
    }
}
