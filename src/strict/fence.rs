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
//!   request may leave; a request handed to a client that may write it on a pooled
//!   connection counts as sent from that hand-over on ([`Wire::hand_over`]), decided
//!   under the same lock as the stop's "was anything sent" question.
//!
//! The model checks in `fence/model_tests.rs` (shuttle) run this code under explored
//! interleavings; `docs/RELIABILITY.md` says what they check.

use std::sync::{Arc, OnceLock};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{CommandRef, Fatal, FatalCategory};

mod sync;

pub(crate) use sync::{FenceSync, TokioSync};

/// Why the fence refused (or withdrew) an admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the fatal latch is set: no further downstream action")]
    Latched,
    #[error("the gateway is stopping: no new downstream action")]
    Stopping,
}

impl Refusal {
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Latched => "latched",
            Self::Stopping => "stopping",
        }
    }
}

/// Which leg of a command holds the fence (`leg` in `/status`: the same words as
/// [`FenceLeg::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
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
    pub leg: Option<FenceLeg>,
    pub request_id: Option<String>,
    pub channel: Option<String>,
    pub held_seconds: Option<f64>,
}

/// The result of a latch: the cause in force, and whether this call set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Latched {
    pub fatal: Fatal,
    pub first: bool,
}

/// Told once, with the winning cause, when the latch is first set (metrics).
pub(crate) type LatchObserver = Box<dyn Fn(&Fatal) + Send + Sync>;

/// The fence. `S` is what it is made of: production always uses `TokioSync`; the model
/// checks run the same code on shuttle's primitives (see `FenceSync`).
pub struct Fence<S: FenceSync = TokioSync> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: FenceSync> {
    strict: bool,
    permits: Arc<S::Semaphore>,
    state: S::Mutex<State<S>>,
    latched: CancellationToken,
    observer: OnceLock<LatchObserver>,
}

struct State<S: FenceSync> {
    fatal: Option<Fatal>,
    stopping: bool,
    next_ticket: u64,
    /// Strict mode only: who holds the single permit.
    held: Option<Held<S>>,
    /// Test builds only: the decisions in the order this lock serialised them. Ghost state
    /// for the model checks; the fence never reads it.
    #[cfg(test)]
    history: Vec<Decision>,
}

struct Held<S: FenceSync> {
    ticket: u64,
    leg: FenceLeg,
    command: CommandRef,
    since: Instant,
    wire: Arc<S::Cell>,
}

/// One decision of the fence, as the model checks see it (test builds only).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Admitted {
        ticket: u64,
    },
    AdmitRefused(Refusal),
    /// The first latch (later ones change nothing).
    Latched,
    Stopping,
    /// A step of an admission (recheck, send, connect) was allowed or refused.
    StepAllowed,
    StepRefused(Refusal),
    /// The admission with this ticket let go of the fence.
    Released {
        ticket: u64,
    },
}

/// Where an admitted request stands on the way to the MCP server. Kept in the
/// admission's atomic cell as its [`WireState::bits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WireState {
    /// Nothing of it has left, and no connection is being made for it.
    None,
    /// A connection for it is being made; none of its bytes has left.
    Connecting,
    /// Bytes of it may have reached the server (monotonic, but for one proof to the
    /// contrary: a forwarding proxy's `407`, see [`Admission::not_forwarded`]).
    Sent,
    /// Handed to a client that may write it on a pooled connection without telling:
    /// counted as sent, unless the connector reports a new connection for it first.
    Handing,
}

impl WireState {
    /// The cell's value for this state.
    const fn bits(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Connecting => 1,
            Self::Sent => 2,
            Self::Handing => 3,
        }
    }

    /// The state a cell value stands for. Only [`WireState::bits`] is ever stored.
    fn from_bits(bits: u8) -> Self {
        match bits {
            0 => Self::None,
            1 => Self::Connecting,
            2 => Self::Sent,
            3 => Self::Handing,
            other => unreachable!("the wire cell holds only WireState bits, not {other}"),
        }
    }

    /// Whether a request in this state may have reached the server.
    fn may_have_left(self) -> bool {
        match self {
            Self::Sent | Self::Handing => true,
            Self::None | Self::Connecting => false,
        }
    }

    fn load<S: FenceSync>(cell: &S::Cell) -> Self {
        Self::from_bits(S::load(cell))
    }

    fn store<S: FenceSync>(self, cell: &S::Cell) {
        S::store(cell, self.bits());
    }

    /// Moves `cell` from `current` to `new`, if it holds `current`.
    fn advance<S: FenceSync>(cell: &S::Cell, current: Self, new: Self) {
        S::compare_exchange(cell, current.bits(), new.bits());
    }
}

/// Proof of admission through the fence. Dropping it releases the permit.
pub struct Admission<S: FenceSync = TokioSync> {
    inner: Arc<Inner<S>>,
    ticket: u64,
    command: CommandRef,
    wire: Arc<S::Cell>,
    _permit: S::Permit,
}

/// A connector's view of one admission: it can report that a connection is being made
/// and, atomically with the fence's checks, that the request may now leave. It cannot
/// admit anything.
pub(crate) struct Wire<S: FenceSync = TokioSync> {
    inner: Arc<Inner<S>>,
    wire: Arc<S::Cell>,
}

impl<S: FenceSync> Clone for Fence<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S: FenceSync> Clone for Wire<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            wire: self.wire.clone(),
        }
    }
}

impl Fence {
    /// A fence admitting `permits` commands at once; strict fences must have one.
    pub fn new(strict: bool, permits: usize) -> Self {
        Self::with_sync(strict, permits)
    }
}

impl<S: FenceSync> Fence<S> {
    /// [`Fence::new`] on other primitives (the model checks).
    pub(crate) fn with_sync(strict: bool, permits: usize) -> Self {
        assert!(
            !strict || permits == 1,
            "a strict fence admits exactly one command at a time"
        );
        Self {
            inner: Arc::new(Inner {
                strict,
                permits: S::semaphore(permits.max(1)),
                state: S::mutex(State {
                    fatal: None,
                    stopping: false,
                    next_ticket: 0,
                    held: None,
                    #[cfg(test)]
                    history: Vec::new(),
                }),
                latched: CancellationToken::new(),
                observer: OnceLock::new(),
            }),
        }
    }

    /// Sets what is told of the first latch (once; later calls are ignored).
    pub(crate) fn observe_latches(&self, observer: LatchObserver) {
        let _ = self.inner.observer.set(observer);
    }

    pub(crate) fn is_strict(&self) -> bool {
        self.inner.strict
    }

    /// Waits for a permit, then admits unless latched or stopping.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future before it resolves takes no permit.
    pub async fn admit(&self, command: CommandRef) -> Result<Admission<S>, Refusal> {
        self.inner.refusal()?;
        let Some(permit) = S::acquire(self.inner.permits.clone()).await else {
            return Err(self.inner.refusal().err().unwrap_or(Refusal::Stopping));
        };
        let mut state = self.inner.lock();
        let refused = if state.fatal.is_some() {
            Some(Refusal::Latched)
        } else if state.stopping {
            Some(Refusal::Stopping)
        } else {
            None
        };
        if let Some(refusal) = refused {
            #[cfg(test)]
            state.history.push(Decision::AdmitRefused(refusal));
            return Err(refusal);
        }
        state.next_ticket += 1;
        let ticket = state.next_ticket;
        #[cfg(test)]
        state.history.push(Decision::Admitted { ticket });
        let wire = Arc::new(S::cell(WireState::None.bits()));
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
    pub(crate) fn latch(&self, category: FatalCategory, command: &CommandRef) -> Latched {
        self.inner.latch(category, command)
    }

    /// Strict mode: latches `stopped_before_ack` if the admission holding the fence may
    /// have reached an MCP server; otherwise (nothing held, or nothing sent) the stop is
    /// clean. Decided under the fence's lock: with stopping set, an admission that has
    /// sent nothing can no longer start, so a "clean" answer stays true.
    pub(crate) fn latch_if_sent_on_stop(&self) -> Option<Latched> {
        let command = {
            let state = self.inner.lock();
            let held = state.held.as_ref()?;
            if !WireState::load::<S>(&held.wire).may_have_left() {
                return None;
            }
            held.command.clone()
        };
        Some(self.inner.latch(FatalCategory::StoppedBeforeAck, &command))
    }

    /// Marks the current cause as persisted to the latch file.
    pub(crate) fn mark_persisted(&self) {
        if let Some(f) = self.inner.lock().fatal.as_mut() {
            f.persisted = true;
        }
    }

    /// A latch restored from the latch file at start: marks the cause in force persisted,
    /// with the persisted latch's own time (`latched_at`, RFC 3339) instead of now.
    pub(crate) fn mark_restored(&self, latched_at: &str) {
        if let Some(f) = self.inner.lock().fatal.as_mut() {
            f.persisted = true;
            latched_at.clone_into(&mut f.latched_at);
        }
    }

    /// Refuses all further admissions (graceful stop); admitted commands go on.
    pub(crate) fn stop_admitting(&self) {
        let mut state = self.inner.lock();
        state.stopping = true;
        #[cfg(test)]
        state.history.push(Decision::Stopping);
    }

    pub(crate) fn fatal(&self) -> Option<Fatal> {
        self.inner.lock().fatal.clone()
    }

    /// Cancelled the moment the latch fires.
    pub(crate) fn latched_token(&self) -> CancellationToken {
        self.inner.latched.clone()
    }

    pub(crate) fn snapshot(&self) -> FenceSnapshot {
        let state = self.inner.lock();
        match &state.held {
            Some(h) => FenceSnapshot {
                held: true,
                leg: Some(h.leg),
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

impl<S: FenceSync> Inner<S> {
    fn lock(&self) -> S::Guard<'_, State<S>> {
        // A poisoned fence state is still the truth: a panic elsewhere must not unlatch.
        S::lock(&self.state)
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
    fn check(&self, state: &mut State<S>, sent: bool) -> Result<(), Refusal> {
        let verdict = if state.fatal.is_some() {
            Err(Refusal::Latched)
        } else if self.strict && state.stopping && !sent {
            Err(Refusal::Stopping)
        } else {
            Ok(())
        };
        #[cfg(test)]
        state.history.push(match verdict {
            Ok(()) => Decision::StepAllowed,
            Err(refusal) => Decision::StepRefused(refusal),
        });
        verdict
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
                    #[cfg(test)]
                    state.history.push(Decision::Latched);
                    Latched { fatal, first: true }
                }
            }
        };
        S::close(&self.permits);
        self.latched.cancel();
        if latched.first {
            let f = &latched.fatal;
            crate::stderr::line(format_args!("{}", f.one_line()));
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

impl<S: FenceSync> Admission<S> {
    /// Re-checks the fence before a downstream step that sends nothing of the request
    /// itself (spawn, restart, waiting for a child). Refused once latched, and in strict
    /// mode once a stop began while nothing of this request was sent.
    /// The command this admission is for (names only: ids, channel, method).
    pub(crate) fn command(&self) -> &CommandRef {
        &self.command
    }

    pub(crate) fn recheck(&self) -> Result<(), Refusal> {
        let mut state = self.inner.lock();
        self.inner.check(&mut state, self.is_sent())
    }

    /// Re-checks the fence and, if it allows, marks the request as possibly on the wire,
    /// in one step under the fence's lock. Call it right before bytes of the request may
    /// leave (a write to a child, an HTTP request on a connection), with no `.await` in
    /// between.
    pub(crate) fn begin_send(&self) -> Result<(), Refusal> {
        let mut state = self.inner.lock();
        self.inner.check(&mut state, self.is_sent())?;
        WireState::Sent.store::<S>(&self.wire);
        Ok(())
    }

    /// The request went no further than a forwarding proxy, which answered that it did
    /// not forward it (`407 Proxy Authentication Required`): nothing of it reached an MCP
    /// server, so the admission is back to "nothing sent" (a stop from then on is clean,
    /// as after a refused connect). Decided under the fence's lock. A transport calls it
    /// only for the answer to the leg's first request, never once an earlier request of
    /// the leg may have reached a server.
    pub(crate) fn not_forwarded(&self) {
        let _state = self.inner.lock();
        WireState::None.store::<S>(&self.wire);
    }

    /// Whether bytes of this request may have reached an MCP server.
    pub(crate) fn is_sent(&self) -> bool {
        WireState::load::<S>(&self.wire).may_have_left()
    }

    /// Whether a connector may report the send late through a [`Wire`] (strict mode:
    /// one admission at a time, so a connection belongs to exactly one request).
    pub(crate) fn tracks_connects(&self) -> bool {
        self.inner.strict
    }

    /// The connector's handle for this admission.
    pub(crate) fn wire(&self) -> Wire<S> {
        Wire {
            inner: self.inner.clone(),
            wire: self.wire.clone(),
        }
    }

    /// Records which leg holds the fence (for `/status`).
    pub(crate) fn set_leg(&self, leg: FenceLeg) {
        let mut state = self.inner.lock();
        if let Some(h) = state.held.as_mut().filter(|h| h.ticket == self.ticket) {
            h.leg = leg;
        }
    }

    /// Latches fatal while this admission still holds the permit.
    pub(crate) fn latch(&self, category: FatalCategory) -> Latched {
        self.inner.latch(category, &self.command)
    }
}

impl<S: FenceSync> Wire<S> {
    /// Right before the request is handed to a client that may write it on a pooled
    /// connection without telling: re-checks the fence and, if it allows, counts the request
    /// as possibly sent, in one step under the fence's lock. A stop from then on finds it
    /// sent (strict: `stopped_before_ack`), unless the connector reports a new connection
    /// for it first ([`Wire::connecting`]), which nothing leaves before [`Wire::connected`].
    /// Without this step, a stop between a `recheck` and the hand-over would find nothing
    /// sent and end clean while the pooled connection writes the request.
    pub(crate) fn hand_over(&self) -> Result<(), Refusal> {
        let mut state = self.inner.lock();
        let wire = WireState::load::<S>(&self.wire);
        self.inner.check(&mut state, wire.may_have_left())?;
        if wire != WireState::Sent {
            WireState::Handing.store::<S>(&self.wire);
        }
        Ok(())
    }

    /// A connection for the request is being made: nothing of it has left yet (unless an
    /// earlier exchange of the same leg already sent it; that stays sent).
    pub(crate) fn connecting(&self) {
        WireState::advance::<S>(&self.wire, WireState::Handing, WireState::Connecting);
        WireState::advance::<S>(&self.wire, WireState::None, WireState::Connecting);
    }

    /// The connection is up and the request is about to be written: allowed only if the
    /// fence still allows this admission, decided atomically with marking it sent. A
    /// refusal means the connection must be dropped unused.
    pub(crate) fn connected(&self) -> Result<(), Refusal> {
        let mut state = self.inner.lock();
        let sent = WireState::load::<S>(&self.wire).may_have_left();
        self.inner.check(&mut state, sent)?;
        WireState::Sent.store::<S>(&self.wire);
        Ok(())
    }

    /// After the request was handed to the client: if no connection was started for it,
    /// it went out on a pooled connection and may have reached the server.
    pub(crate) fn handed_over(&self) {
        WireState::advance::<S>(&self.wire, WireState::Handing, WireState::Sent);
        WireState::advance::<S>(&self.wire, WireState::None, WireState::Sent);
    }
}

impl<S: FenceSync> Drop for Admission<S> {
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
        #[cfg(test)]
        state.history.push(Decision::Released { ticket: self.ticket });
    }
}

#[cfg(test)]
pub(crate) mod model_tests;
#[cfg(test)]
mod tests;
