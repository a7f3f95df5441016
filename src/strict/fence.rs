//! The dispatch fence: the only minter of [`Admission`], the proof every downstream entry
//! point requires.
//!
//! In strict mode it holds one permit, global across channels, command types, transports
//! and workers; in default mode it holds `mcp.max_concurrent` permits and never latches.
//! Invariants:
//! - admission reads the fatal state under the same lock the latch writes it, after the
//!   permit is taken: no admission is granted after a latch;
//! - the latch is monotonic: the first cause wins, it is never cleared in-process;
//! - an [`Admission`] cannot be cloned or built outside this module.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{CommandRef, Fatal, FatalCategory};

/// Why the fence refused (or withdrew) an admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the fatal latch is set: no further downstream action")]
    Latched,
    #[error("the gateway is stopping: no new downstream action")]
    Stopping,
}

impl Refusal {
    pub fn kind(self) -> &'static str {
        match self {
            Self::Latched => "latched",
            Self::Stopping => "stopping",
        }
    }
}

/// Which leg of a command holds the fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceLeg {
    Downstream,
    Deliver,
}

impl FenceLeg {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Downstream => "downstream",
            Self::Deliver => "deliver",
        }
    }
}

/// `/status` view of the fence.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FenceSnapshot {
    pub held: bool,
    pub leg: Option<&'static str>,
    pub request_id: Option<String>,
    pub channel: Option<String>,
    pub held_seconds: Option<f64>,
}

#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    strict: bool,
    permits: Arc<Semaphore>,
    state: Mutex<State>,
    latched: CancellationToken,
}

#[derive(Default)]
struct State {
    fatal: Option<Fatal>,
    stopping: bool,
    next_ticket: u64,
    /// Strict mode only: who holds the single permit.
    held: Option<Held>,
}

struct Held {
    ticket: u64,
    leg: FenceLeg,
    command: CommandRef,
    since: Instant,
}

/// Proof of admission through the fence. Dropping it releases the permit.
pub struct Admission {
    inner: Arc<Inner>,
    ticket: u64,
    command: CommandRef,
    _permit: OwnedSemaphorePermit,
}

impl Fence {
    /// A fence admitting `permits` commands at once; strict fences must have one.
    pub fn new(strict: bool, permits: usize) -> Self {
        assert!(
            !strict || permits == 1,
            "a strict fence admits exactly one command at a time"
        );
        Self {
            inner: Arc::new(Inner {
                strict,
                permits: Arc::new(Semaphore::new(permits.max(1))),
                state: Mutex::new(State::default()),
                latched: CancellationToken::new(),
            }),
        }
    }

    pub fn is_strict(&self) -> bool {
        self.inner.strict
    }

    /// Waits for a permit, then admits unless latched or stopping.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future before it resolves takes no permit.
    pub async fn admit(&self, command: CommandRef) -> Result<Admission, Refusal> {
        self.inner.refusal()?;
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.inner.refusal().err().unwrap_or(Refusal::Stopping))?;
        let mut state = self.inner.lock();
        if state.fatal.is_some() {
            return Err(Refusal::Latched);
        }
        if state.stopping {
            return Err(Refusal::Stopping);
        }
        state.next_ticket += 1;
        let ticket = state.next_ticket;
        if self.inner.strict {
            state.held = Some(Held {
                ticket,
                leg: FenceLeg::Downstream,
                command: command.clone(),
                since: Instant::now(),
            });
        }
        drop(state);
        Ok(Admission {
            inner: self.inner.clone(),
            ticket,
            command,
            _permit: permit,
        })
    }

    /// Latches fatal (first cause wins) and closes the fence. Returns the winning cause.
    pub fn latch(&self, category: FatalCategory, command: &CommandRef) -> Fatal {
        self.inner.latch(category, command)
    }

    /// Marks the current cause as persisted to the latch file.
    pub fn mark_persisted(&self) {
        if let Some(f) = self.inner.lock().fatal.as_mut() {
            f.persisted = true;
        }
    }

    /// Refuses all further admissions (graceful stop); admitted commands go on.
    pub fn stop_admitting(&self) {
        self.inner.lock().stopping = true;
    }

    pub fn fatal(&self) -> Option<Fatal> {
        self.inner.lock().fatal.clone()
    }

    /// Cancelled the moment the latch fires.
    pub fn latched_token(&self) -> CancellationToken {
        self.inner.latched.clone()
    }

    pub fn snapshot(&self) -> FenceSnapshot {
        let state = self.inner.lock();
        match &state.held {
            Some(h) => FenceSnapshot {
                held: true,
                leg: Some(h.leg.as_str()),
                request_id: h.command.request_id.clone(),
                channel: h.command.channel.clone(),
                held_seconds: Some(h.since.elapsed().as_secs_f64()),
            },
            None => FenceSnapshot {
                held: false,
                leg: None,
                request_id: None,
                channel: None,
                held_seconds: None,
            },
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned fence state is still the truth: a panic elsewhere must not unlatch.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refusal(&self) -> Result<(), Refusal> {
        let state = self.lock();
        if state.fatal.is_some() {
            Err(Refusal::Latched)
        } else if state.stopping {
            Err(Refusal::Stopping)
        } else {
            Ok(())
        }
    }

    fn latch(&self, category: FatalCategory, command: &CommandRef) -> Fatal {
        self.latch_with(Fatal::new(category, command))
    }

    fn latch_with(&self, fatal: Fatal) -> Fatal {
        let winner = {
            let mut state = self.lock();
            state.fatal.get_or_insert(fatal).clone()
        };
        self.permits.close();
        self.latched.cancel();
        winner
    }
}

impl Admission {
    /// Re-checks the fence before a downstream step. Call it before connect, initialize,
    /// write, session DELETE, spawn or restart.
    pub fn recheck(&self) -> Result<(), Refusal> {
        let state = self.inner.lock();
        if state.fatal.is_some() {
            Err(Refusal::Latched)
        } else {
            Ok(())
        }
    }

    /// Records which leg holds the fence (for `/status`).
    pub fn set_leg(&self, leg: FenceLeg) {
        let mut state = self.inner.lock();
        if let Some(h) = state.held.as_mut().filter(|h| h.ticket == self.ticket) {
            h.leg = leg;
        }
    }

    /// Latches fatal while this admission still holds the permit.
    pub fn latch(&self, category: FatalCategory) -> Fatal {
        self.inner.latch(category, &self.command)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        // A panic while holding a strict permit is an internal failure after (possible)
        // dispatch: latch before the permit is released, so nothing else is admitted.
        if self.inner.strict && std::thread::panicking() {
            self.inner.latch(FatalCategory::InternalError, &self.command);
        }
        let mut state = self.inner.lock();
        if state.held.as_ref().is_some_and(|h| h.ticket == self.ticket) {
            state.held = None;
        }
    }
}

#[cfg(test)]
mod tests;
