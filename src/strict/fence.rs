//! The dispatch fence: the only minter of [`Admission`], the proof every downstream entry
//! point requires.
//!
//! In strict mode it holds one permit, global across channels, command types, transports
//! and workers; in default mode it holds `mcp.max_concurrent` permits and never latches.
//! Invariants:
//! - admission reads the fatal state under the same lock the latch writes it, after the
//!   permit is taken: no admission is granted after a latch;
//! - the latch is monotonic: the first cause wins, it is never cleared in-process;
//! - latching is one operation, whoever latches (a command, a stop past its grace, a
//!   panic): it reports whether it was the first, and only the first reports the cause
//!   (one stderr line, one `error` event, the latch observer for metrics);
//! - an [`Admission`] cannot be cloned or built outside this module, and it knows whether
//!   its request may have reached an MCP server ([`Admission::begin_send`]); in strict mode
//!   a stop refuses every step of an admission that has sent nothing yet;
//! - only an admission mints a [`Wire`], the handle a connector uses to report when the
//!   request may leave.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

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

/// The result of a latch: the cause in force, and whether this call set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latched {
    pub fatal: Fatal,
    pub first: bool,
}

/// Told once, with the winning cause, when the latch is first set (metrics).
pub type LatchObserver = Box<dyn Fn(&Fatal) + Send + Sync>;

#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    strict: bool,
    permits: Arc<Semaphore>,
    state: Mutex<State>,
    latched: CancellationToken,
    observer: OnceLock<LatchObserver>,
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
    wire: Arc<AtomicU8>,
}

/// Where an admitted request stands on the way to the MCP server.
const WIRE_NONE: u8 = 0;
/// A connection for it is being made; none of its bytes has left.
const WIRE_CONNECTING: u8 = 1;
/// Bytes of it may have reached the server (monotonic).
const WIRE_SENT: u8 = 2;

/// Proof of admission through the fence. Dropping it releases the permit.
pub struct Admission {
    inner: Arc<Inner>,
    ticket: u64,
    command: CommandRef,
    wire: Arc<AtomicU8>,
    _permit: OwnedSemaphorePermit,
}

/// A connector's view of one admission: it can report that a connection is being made
/// and, atomically with the fence's checks, that the request may now leave. It cannot
/// admit anything.
#[derive(Clone)]
pub struct Wire {
    inner: Arc<Inner>,
    wire: Arc<AtomicU8>,
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
                observer: OnceLock::new(),
            }),
        }
    }

    /// Sets what is told of the first latch (once; later calls are ignored).
    pub fn observe_latches(&self, observer: LatchObserver) {
        let _ = self.inner.observer.set(observer);
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
        let wire = Arc::new(AtomicU8::new(WIRE_NONE));
        if self.inner.strict {
            state.held = Some(Held {
                ticket,
                leg: FenceLeg::Downstream,
                command: command.clone(),
                since: Instant::now(),
                wire: wire.clone(),
            });
        }
        drop(state);
        Ok(Admission {
            inner: self.inner.clone(),
            ticket,
            command,
            wire,
            _permit: permit,
        })
    }

    /// Latches fatal (first cause wins) and closes the fence.
    pub fn latch(&self, category: FatalCategory, command: &CommandRef) -> Latched {
        self.inner.latch(category, command)
    }

    /// Strict mode: latches `stopped_before_ack` if the admission holding the fence may
    /// have reached an MCP server; otherwise (nothing held, or nothing sent) the stop is
    /// clean. Decided under the fence's lock: with stopping set, an admission that has
    /// sent nothing can no longer start, so a "clean" answer stays true.
    pub fn latch_if_sent_on_stop(&self) -> Option<Latched> {
        let command = {
            let state = self.inner.lock();
            let held = state.held.as_ref()?;
            if held.wire.load(Ordering::SeqCst) != WIRE_SENT {
                return None;
            }
            held.command.clone()
        };
        Some(self.inner.latch(FatalCategory::StoppedBeforeAck, &command))
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

    /// May an admission take its next downstream step? `sent`: whether its request may
    /// already have reached the server (a resume or a read goes on during a stop).
    fn check(&self, state: &State, sent: bool) -> Result<(), Refusal> {
        if state.fatal.is_some() {
            Err(Refusal::Latched)
        } else if self.strict && state.stopping && !sent {
            Err(Refusal::Stopping)
        } else {
            Ok(())
        }
    }

    /// The one latch operation. The first caller records the cause and reports it: one
    /// line on stderr (the machine-readable contract, never through telemetry), one
    /// `error` event in the current span, and the observer (metrics).
    fn latch(&self, category: FatalCategory, command: &CommandRef) -> Latched {
        let latched = {
            let mut state = self.lock();
            match &state.fatal {
                Some(winner) => Latched {
                    fatal: winner.clone(),
                    first: false,
                },
                None => {
                    let fatal = Fatal::new(category, command);
                    state.fatal = Some(fatal.clone());
                    Latched { fatal, first: true }
                }
            }
        };
        self.permits.close();
        self.latched.cancel();
        if latched.first {
            let f = &latched.fatal;
            eprintln!("tunnelgate: {}", f.one_line());
            tracing::error!(
                category = f.category.as_str(),
                exit_code = f.exit_code,
                request_id = f.request_id.as_deref(),
                channel = f.channel.as_deref(),
                method = f.method.as_deref(),
                "fatal latch set"
            );
            if let Some(observer) = self.observer.get() {
                observer(f);
            }
        }
        latched
    }
}

impl Admission {
    /// Re-checks the fence before a downstream step that sends nothing of the request
    /// itself (spawn, restart, waiting for a child). Refused once latched, and in strict
    /// mode once a stop began while nothing of this request was sent.
    pub fn recheck(&self) -> Result<(), Refusal> {
        let state = self.inner.lock();
        self.inner.check(&state, self.is_sent())
    }

    /// Re-checks the fence and, if it allows, marks the request as possibly on the wire,
    /// in one step under the fence's lock. Call it right before bytes of the request may
    /// leave (a write to a child, an HTTP request on a connection), with no `.await` in
    /// between.
    pub fn begin_send(&self) -> Result<(), Refusal> {
        let state = self.inner.lock();
        self.inner.check(&state, self.is_sent())?;
        self.wire.store(WIRE_SENT, Ordering::SeqCst);
        Ok(())
    }

    /// Whether bytes of this request may have reached an MCP server.
    pub fn is_sent(&self) -> bool {
        self.wire.load(Ordering::SeqCst) == WIRE_SENT
    }

    /// Whether a connector may report the send late through a [`Wire`] (strict mode:
    /// one admission at a time, so a connection belongs to exactly one request).
    pub fn tracks_connects(&self) -> bool {
        self.inner.strict
    }

    /// The connector's handle for this admission.
    pub fn wire(&self) -> Wire {
        Wire {
            inner: self.inner.clone(),
            wire: self.wire.clone(),
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
    pub fn latch(&self, category: FatalCategory) -> Latched {
        self.inner.latch(category, &self.command)
    }
}

impl Wire {
    /// A connection for the request is being made: nothing of it has left yet (unless an
    /// earlier exchange of the same leg already sent it; that stays sent).
    pub fn connecting(&self) {
        let _ = self
            .wire
            .compare_exchange(WIRE_NONE, WIRE_CONNECTING, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The connection is up and the request is about to be written: allowed only if the
    /// fence still allows this admission, decided atomically with marking it sent. A
    /// refusal means the connection must be dropped unused.
    pub fn connected(&self) -> Result<(), Refusal> {
        let state = self.inner.lock();
        let sent = self.wire.load(Ordering::SeqCst) == WIRE_SENT;
        self.inner.check(&state, sent)?;
        self.wire.store(WIRE_SENT, Ordering::SeqCst);
        Ok(())
    }

    /// After the request was handed to the client: if no connection was started for it,
    /// it went out on a pooled connection and may have reached the server.
    pub fn handed_over(&self) {
        let _ = self
            .wire
            .compare_exchange(WIRE_NONE, WIRE_SENT, Ordering::SeqCst, Ordering::SeqCst);
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
