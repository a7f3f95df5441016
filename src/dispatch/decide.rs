//! What a command's lifecycle does next: the states an admitted command walks and the
//! one transition each allows, which hold the strict-mode latch decisions and the
//! default-mode reports. No I/O, no clock and no state beyond the rules fixed at
//! startup: every transition is a pure function of its state and its inputs.
//!
//! An admitted command walks three states: [`BeforeDispatch`], [`Running`]
//! (its downstream leg), [`Delivering`] (its terminal response). Each state is consumed
//! by its one transition, which says what the driver (`command.rs`, `discover.rs`) does
//! next; the driver performs that and nothing else. Beside them: the [`Rules`] they
//! decide by (which also say what a stdio keeper's own abandoned step latches), and
//! [`fatal_category`], what a dispatched command's unacknowledged answer latches. For the
//! tests only (`cfg(test)`), `decide` flattens the two decision points into one function
//! of a `Situation`, and the table test lists every combination of its inputs.

use crate::control::{AttemptResult, Delivery, Refused};
use crate::downstream::LegOutcome;
use crate::strict::FatalCategory;

/// Where the command stands (for [`decide`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The downstream leg ended with `outcome`; `cut` when the stop cut it short (grace
    /// over, or a second stop request).
    LegEnded { outcome: LegOutcome, cut: bool },
    /// The terminal response's delivery ended.
    Delivered {
        delivery: Delivery,
        last_attempt: AttemptResult,
        /// Why the control plane refused it, when it said.
        refused: Option<Refused>,
        /// How the leg whose reply was posted ended.
        leg: LegOutcome,
    },
}

/// Everything a decision depends on (for [`decide`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Situation {
    pub stage: Stage,
    /// The command's `response_timeout` has passed.
    pub deadline_passed: bool,
    pub strict: bool,
    /// `strict.on_downstream_ambiguity = "fatal"`.
    pub ambiguity_is_fatal: bool,
}

/// What the lifecycle does, flattened (for [`decide`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Post the leg's reply as the terminal response, then decide on its delivery.
    Deliver,
    /// Post it bounded by the cleanup time (the gateway is stopping), then decide.
    DeliverWithinCleanup,
    /// Post nothing: the deadline passed, and a late answer is never synthesized.
    Silent,
    /// Latch; nothing more is posted.
    Latch(FatalCategory),
    /// Latch, then tell the caller "effect unknown", bounded by the cleanup time.
    LatchThenTell(FatalCategory),
    /// The terminal response was acknowledged: done.
    Done,
    /// Not acknowledged, and nothing to latch (default mode, or nothing dispatched):
    /// logged and counted.
    Report,
    /// The MCP server's answer was refused as too large for the tunnel: tell the caller
    /// so in a small error instead (its own delivery), then report.
    TellTooLarge,
    /// As [`Decision::TellTooLarge`] in strict mode: latch, then tell the caller, bounded
    /// by the cleanup time.
    LatchThenTellTooLarge(FatalCategory),
}

/// The rules a strict gateway decides by, fixed at startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    pub strict: bool,
    /// `strict.on_downstream_ambiguity = "fatal"`.
    pub ambiguity_is_fatal: bool,
}

impl Rules {
    /// A downstream step the gateway took on its own ended abandoned (its `initialize`
    /// of a stdio child, written and never answered), outside any command: strict mode
    /// with ambiguity fatal latches `downstream_ambiguous`, as on any abandoned leg.
    pub(crate) fn own_step_abandoned(self) -> Option<FatalCategory> {
        (self.strict && self.ambiguity_is_fatal).then_some(FatalCategory::DownstreamAmbiguous)
    }
}

/// An admitted command that has not started its downstream leg. The lifecycle is a
/// chain of these states, each consumed by the one transition it allows, so the driver
/// (`command.rs`) cannot ask a question out of order.
#[derive(Debug)]
pub(crate) struct BeforeDispatch {
    rules: Rules,
}

/// The downstream leg runs.
#[derive(Debug)]
pub(crate) struct Running {
    rules: Rules,
}

/// The terminal response is being delivered.
#[derive(Debug)]
pub(crate) struct Delivering {
    rules: Rules,
    /// How the leg whose reply is posted ended.
    leg: LegOutcome,
}

/// What an admitted command does first.
#[derive(Debug)]
pub(crate) enum Start {
    /// The deadline passed before dispatch: dropped, nothing sent.
    Expired,
    /// Run the leg.
    Run(Running),
}

/// What the lifecycle does when the leg has ended.
#[derive(Debug)]
pub(crate) enum AfterLeg {
    /// Post the leg's reply as the terminal response (bounded by the cleanup time when
    /// the gateway is stopping), then decide on its delivery.
    Deliver { within_cleanup: bool, next: Delivering },
    /// Post nothing: the deadline passed, and a late answer is never synthesized.
    Silent,
    /// Latch; nothing more is posted.
    Latch(FatalCategory),
    /// Latch, then tell the caller "effect unknown", bounded by the cleanup time.
    LatchThenTell(FatalCategory),
}

/// What the lifecycle does when the terminal delivery has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterDelivery {
    Done,
    Latch(FatalCategory),
    Report,
    /// The control plane refused the MCP server's answer as too large: post a small
    /// error for the same request instead, once (whatever becomes of it, nothing more is
    /// posted), then report.
    TellTooLarge,
    /// Latch (strict mode), then [`AfterDelivery::TellTooLarge`] bounded by the cleanup
    /// time.
    LatchThenTellTooLarge(FatalCategory),
}

impl BeforeDispatch {
    pub(crate) fn new(rules: Rules) -> Self {
        Self { rules }
    }

    /// Just before dispatch.
    pub(crate) fn start(self, deadline_passed: bool) -> Start {
        if deadline_passed {
            Start::Expired
        } else {
            Start::Run(Running { rules: self.rules })
        }
    }
}

impl Running {
    /// The leg ended with `outcome`; `cut` when the stop cut it short (grace over, or a
    /// second stop request).
    pub(crate) fn leg_ended(self, outcome: LegOutcome, cut: bool, deadline_passed: bool) -> AfterLeg {
        let Rules {
            strict,
            ambiguity_is_fatal,
        } = self.rules;
        let dispatched = outcome != LegOutcome::NotSent;
        let deliver = |within_cleanup| AfterLeg::Deliver {
            within_cleanup,
            next: Delivering {
                rules: self.rules,
                leg: outcome,
            },
        };
        if deadline_passed {
            return if dispatched && strict {
                AfterLeg::Latch(FatalCategory::DeadlineExpired)
            } else {
                AfterLeg::Silent
            };
        }
        match (cut, dispatched, strict, outcome) {
            (true, true, true, _) => AfterLeg::LatchThenTell(FatalCategory::StoppedBeforeAck),
            (true, _, _, _) => deliver(true),
            (false, _, true, LegOutcome::Abandoned) if ambiguity_is_fatal => {
                AfterLeg::LatchThenTell(FatalCategory::DownstreamAmbiguous)
            }
            (false, _, _, _) => deliver(false),
        }
    }
}

impl Running {
    /// The leg ended `not_sent` for the command's own request, after a step the gateway
    /// took for it under its admission ended abandoned (the `initialize` of a restarted
    /// stdio child, written and never answered). The caller is told "not delivered" as
    /// for any `not_sent` leg; strict mode with ambiguity fatal latches
    /// `downstream_ambiguous` first, because the step's effect is unknown.
    pub(crate) fn own_step_abandoned(self, cut: bool, deadline_passed: bool) -> AfterLeg {
        let latch = self.rules.own_step_abandoned();
        match (self.leg_ended(LegOutcome::NotSent, cut, deadline_passed), latch) {
            (AfterLeg::Silent, Some(category)) => AfterLeg::Latch(category),
            (AfterLeg::Deliver { .. }, Some(category)) => AfterLeg::LatchThenTell(category),
            (after, _) => after,
        }
    }
}

impl Delivering {
    /// The leg's outcome was not `not_sent`.
    #[cfg(test)]
    pub(crate) fn dispatched(&self) -> bool {
        self.leg != LegOutcome::NotSent
    }

    /// The terminal delivery ended with `delivery`, settled by `last_attempt`, refused
    /// for the reason in `refused` when the control plane gave one.
    ///
    /// An `answered` leg's reply refused as too large is the MCP server's own answer, which
    /// no retry can carry: its caller is told so instead (before the deadline only: a late
    /// error is never synthesized). Strict mode still latches first, as for any refusal.
    pub(crate) fn delivered(
        self,
        delivery: Delivery,
        last_attempt: AttemptResult,
        refused: Option<Refused>,
        deadline_passed: bool,
    ) -> AfterDelivery {
        let dispatched = self.leg != LegOutcome::NotSent;
        let latch = (self.rules.strict && dispatched).then(|| {
            if deadline_passed {
                FatalCategory::DeadlineExpired
            } else {
                fatal_category(last_attempt).unwrap_or(FatalCategory::InternalError)
            }
        });
        let tell_too_large = delivery == Delivery::Rejected
            && refused == Some(Refused::TooLarge)
            && self.leg == LegOutcome::Answered
            && !deadline_passed;
        match delivery {
            Delivery::Acked => AfterDelivery::Done,
            Delivery::NotFound | Delivery::Rejected | Delivery::Ambiguous => match (latch, tell_too_large) {
                (Some(category), true) => AfterDelivery::LatchThenTellTooLarge(category),
                (Some(category), false) => AfterDelivery::Latch(category),
                (None, true) => AfterDelivery::TellTooLarge,
                (None, false) => AfterDelivery::Report,
            },
        }
    }
}

/// The fatal category a strict gateway latches when `last` was the last attempt of a
/// dispatched command's terminal response. `None` for `Ok`.
pub(crate) fn fatal_category(last: AttemptResult) -> Option<FatalCategory> {
    match last {
        AttemptResult::Ok => None,
        AttemptResult::NotFound => Some(FatalCategory::AckNotFound),
        AttemptResult::RejectedStatus => Some(FatalCategory::AckRejected),
        AttemptResult::RetryableStatus | AttemptResult::TransportNotSent => Some(FatalCategory::AckRetriesExhausted),
        AttemptResult::TransportAfterWrite => Some(FatalCategory::AckConnectionLost),
        AttemptResult::Timeout => Some(FatalCategory::AckTimeout),
        AttemptResult::Cancelled => Some(FatalCategory::StoppedBeforeAck),
        // The gateway's own failure, not the control plane's: no descriptor (or socket
        // memory) for the POST, so the caller may lack a result the server produced.
        AttemptResult::LocalExhaustion => Some(FatalCategory::LocalExhaustion),
    }
}

/// The whole decision table as one function of the [`Situation`], for the table test:
/// the lifecycle itself walks the states above.
#[cfg(test)]
pub(crate) fn decide(s: Situation) -> Decision {
    let rules = Rules {
        strict: s.strict,
        ambiguity_is_fatal: s.ambiguity_is_fatal,
    };
    match s.stage {
        Stage::LegEnded { outcome, cut } => match (Running { rules }).leg_ended(outcome, cut, s.deadline_passed) {
            AfterLeg::Deliver {
                within_cleanup: false, ..
            } => Decision::Deliver,
            AfterLeg::Deliver {
                within_cleanup: true, ..
            } => Decision::DeliverWithinCleanup,
            AfterLeg::Silent => Decision::Silent,
            AfterLeg::Latch(c) => Decision::Latch(c),
            AfterLeg::LatchThenTell(c) => Decision::LatchThenTell(c),
        },
        Stage::Delivered {
            delivery,
            last_attempt,
            refused,
            leg,
        } => match (Delivering { rules, leg }).delivered(delivery, last_attempt, refused, s.deadline_passed) {
            AfterDelivery::Done => Decision::Done,
            AfterDelivery::Latch(c) => Decision::Latch(c),
            AfterDelivery::Report => Decision::Report,
            AfterDelivery::TellTooLarge => Decision::TellTooLarge,
            AfterDelivery::LatchThenTellTooLarge(c) => Decision::LatchThenTellTooLarge(c),
        },
    }
}

#[cfg(test)]
mod tests;
