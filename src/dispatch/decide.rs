//! What a command's lifecycle does next, as one pure function: the strict-mode latch
//! decisions and the default-mode reports, with no I/O, no clock and no state.
//!
//! The lifecycle (`lifecycle.rs`) asks twice per admitted command: when its downstream
//! leg ends, and when its terminal delivery ends. It performs what comes back and nothing
//! else; the table test below lists every combination of the inputs.

use crate::control::{AttemptResult, Delivery};
use crate::downstream::LegOutcome;
use crate::strict::FatalCategory;

/// Where the command stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The downstream leg ended with `outcome`; `cut` when the stop cut it short (grace
    /// over, or a second stop request).
    LegEnded { outcome: LegOutcome, cut: bool },
    /// The terminal response's delivery ended.
    Delivered {
        delivery: Delivery,
        last_attempt: AttemptResult,
        /// The leg's outcome was not `not_sent`.
        dispatched: bool,
    },
}

/// Everything a decision depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Situation {
    pub stage: Stage,
    /// The command's `response_timeout` has passed.
    pub deadline_passed: bool,
    pub strict: bool,
    /// `strict.on_downstream_ambiguity = "fatal"`.
    pub ambiguity_is_fatal: bool,
}

/// What the lifecycle does.
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
}

/// The one decision table.
pub(crate) fn decide(s: Situation) -> Decision {
    match s.stage {
        Stage::LegEnded { outcome, cut } => {
            let dispatched = outcome != LegOutcome::NotSent;
            if s.deadline_passed {
                return if dispatched && s.strict {
                    Decision::Latch(FatalCategory::DeadlineExpired)
                } else {
                    Decision::Silent
                };
            }
            match (cut, dispatched, s.strict, outcome) {
                (true, true, true, _) => Decision::LatchThenTell(FatalCategory::StoppedBeforeAck),
                (true, _, _, _) => Decision::DeliverWithinCleanup,
                (false, _, true, LegOutcome::Abandoned) if s.ambiguity_is_fatal => {
                    Decision::LatchThenTell(FatalCategory::DownstreamAmbiguous)
                }
                (false, _, _, _) => Decision::Deliver,
            }
        }
        Stage::Delivered {
            delivery,
            last_attempt,
            dispatched,
        } => match delivery {
            Delivery::Acked => Decision::Done,
            Delivery::NotFound | Delivery::Rejected | Delivery::Ambiguous if s.strict && dispatched => {
                Decision::Latch(if s.deadline_passed {
                    FatalCategory::DeadlineExpired
                } else {
                    last_attempt.fatal_category().unwrap_or(FatalCategory::InternalError)
                })
            }
            Delivery::NotFound | Delivery::Rejected | Delivery::Ambiguous => Decision::Report,
        },
    }
}

#[cfg(test)]
mod tests;
