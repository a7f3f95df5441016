//! Every combination of the inputs, each row written out: (leg outcome, cut by the stop,
//! deadline passed, strict, ambiguity fatal) for a leg's end, (last attempt, dispatched,
//! deadline passed, strict) for a delivery's end, where the delivery is the one the last
//! attempt settles, no reason for a refusal was given, the ambiguity policy must not
//! matter and neither must which dispatched outcome the leg had; and (leg outcome,
//! deadline passed, strict) for a terminal response refused as too large.

use super::*;
use crate::control::AttemptResult::{self, *};
use crate::control::Refused;
use crate::downstream::LegOutcome::{self, *};
use FatalCategory::*;

use Decision::{
    Deliver, DeliverWithinCleanup, Done, Latch, LatchThenTell, LatchThenTellTooLarge, Report, Silent, TellTooLarge,
};

struct Row {
    situation: Situation,
    any_ambiguity_policy: bool,
    /// An `answered` leg's row holds for an `abandoned` one too.
    any_dispatched_leg: bool,
    expected: Decision,
}

fn leg(
    outcome: LegOutcome,
    cut: bool,
    deadline_passed: bool,
    strict: bool,
    ambiguity_is_fatal: bool,
    expected: Decision,
) -> Row {
    Row {
        situation: Situation {
            stage: Stage::LegEnded { outcome, cut },
            deadline_passed,
            strict,
            ambiguity_is_fatal,
        },
        any_ambiguity_policy: false,
        any_dispatched_leg: false,
        expected,
    }
}

fn delivered(
    last_attempt: AttemptResult,
    dispatched: bool,
    deadline_passed: bool,
    strict: bool,
    expected: Decision,
) -> Row {
    Row {
        situation: Situation {
            stage: Stage::Delivered {
                delivery: last_attempt.final_delivery(),
                last_attempt,
                refused: None,
                leg: if dispatched { Answered } else { NotSent },
            },
            deadline_passed,
            strict,
            ambiguity_is_fatal: true,
        },
        any_ambiguity_policy: true,
        any_dispatched_leg: dispatched,
        expected,
    }
}

/// The terminal response of a leg that ended `leg` was refused as too large (`413`).
fn too_large(leg: LegOutcome, deadline_passed: bool, strict: bool, expected: Decision) -> Row {
    Row {
        situation: Situation {
            stage: Stage::Delivered {
                delivery: RejectedStatus.final_delivery(),
                last_attempt: RejectedStatus,
                refused: Some(Refused::TooLarge),
                leg,
            },
            deadline_passed,
            strict,
            ambiguity_is_fatal: true,
        },
        any_ambiguity_policy: true,
        any_dispatched_leg: false,
        expected,
    }
}

#[rustfmt::skip]
fn table() -> Vec<Row> {
    vec![
        // leg(outcome, cut, deadline_passed, strict, ambiguity_is_fatal, expected)
        leg(NotSent  , false, false, false, false, Deliver),
        leg(NotSent  , false, false, false, true , Deliver),
        leg(NotSent  , false, false, true , false, Deliver),
        leg(NotSent  , false, false, true , true , Deliver),
        leg(NotSent  , false, true , false, false, Silent),
        leg(NotSent  , false, true , false, true , Silent),
        leg(NotSent  , false, true , true , false, Silent),
        leg(NotSent  , false, true , true , true , Silent),
        leg(NotSent  , true , false, false, false, DeliverWithinCleanup),
        leg(NotSent  , true , false, false, true , DeliverWithinCleanup),
        leg(NotSent  , true , false, true , false, DeliverWithinCleanup),
        leg(NotSent  , true , false, true , true , DeliverWithinCleanup),
        leg(NotSent  , true , true , false, false, Silent),
        leg(NotSent  , true , true , false, true , Silent),
        leg(NotSent  , true , true , true , false, Silent),
        leg(NotSent  , true , true , true , true , Silent),
        leg(Answered , false, false, false, false, Deliver),
        leg(Answered , false, false, false, true , Deliver),
        leg(Answered , false, false, true , false, Deliver),
        leg(Answered , false, false, true , true , Deliver),
        leg(Answered , false, true , false, false, Silent),
        leg(Answered , false, true , false, true , Silent),
        leg(Answered , false, true , true , false, Latch(DeadlineExpired)),
        leg(Answered , false, true , true , true , Latch(DeadlineExpired)),
        leg(Answered , true , false, false, false, DeliverWithinCleanup),
        leg(Answered , true , false, false, true , DeliverWithinCleanup),
        leg(Answered , true , false, true , false, LatchThenTell(StoppedBeforeAck)),
        leg(Answered , true , false, true , true , LatchThenTell(StoppedBeforeAck)),
        leg(Answered , true , true , false, false, Silent),
        leg(Answered , true , true , false, true , Silent),
        leg(Answered , true , true , true , false, Latch(DeadlineExpired)),
        leg(Answered , true , true , true , true , Latch(DeadlineExpired)),
        leg(Abandoned, false, false, false, false, Deliver),
        leg(Abandoned, false, false, false, true , Deliver),
        leg(Abandoned, false, false, true , false, Deliver),
        leg(Abandoned, false, false, true , true , LatchThenTell(DownstreamAmbiguous)),
        leg(Abandoned, false, true , false, false, Silent),
        leg(Abandoned, false, true , false, true , Silent),
        leg(Abandoned, false, true , true , false, Latch(DeadlineExpired)),
        leg(Abandoned, false, true , true , true , Latch(DeadlineExpired)),
        leg(Abandoned, true , false, false, false, DeliverWithinCleanup),
        leg(Abandoned, true , false, false, true , DeliverWithinCleanup),
        leg(Abandoned, true , false, true , false, LatchThenTell(StoppedBeforeAck)),
        leg(Abandoned, true , false, true , true , LatchThenTell(StoppedBeforeAck)),
        leg(Abandoned, true , true , false, false, Silent),
        leg(Abandoned, true , true , false, true , Silent),
        leg(Abandoned, true , true , true , false, Latch(DeadlineExpired)),
        leg(Abandoned, true , true , true , true , Latch(DeadlineExpired)),
        // delivered(last_attempt, dispatched, deadline_passed, strict, expected)
        delivered(Ok                 , false, false, false, Done),
        delivered(Ok                 , false, false, true , Done),
        delivered(Ok                 , false, true , false, Done),
        delivered(Ok                 , false, true , true , Done),
        delivered(Ok                 , true , false, false, Done),
        delivered(Ok                 , true , false, true , Done),
        delivered(Ok                 , true , true , false, Done),
        delivered(Ok                 , true , true , true , Done),
        delivered(NotFound           , false, false, false, Report),
        delivered(NotFound           , false, false, true , Report),
        delivered(NotFound           , false, true , false, Report),
        delivered(NotFound           , false, true , true , Report),
        delivered(NotFound           , true , false, false, Report),
        delivered(NotFound           , true , false, true , Latch(AckNotFound)),
        delivered(NotFound           , true , true , false, Report),
        delivered(NotFound           , true , true , true , Latch(DeadlineExpired)),
        delivered(RejectedStatus     , false, false, false, Report),
        delivered(RejectedStatus     , false, false, true , Report),
        delivered(RejectedStatus     , false, true , false, Report),
        delivered(RejectedStatus     , false, true , true , Report),
        delivered(RejectedStatus     , true , false, false, Report),
        delivered(RejectedStatus     , true , false, true , Latch(AckRejected)),
        delivered(RejectedStatus     , true , true , false, Report),
        delivered(RejectedStatus     , true , true , true , Latch(DeadlineExpired)),
        delivered(RetryableStatus    , false, false, false, Report),
        delivered(RetryableStatus    , false, false, true , Report),
        delivered(RetryableStatus    , false, true , false, Report),
        delivered(RetryableStatus    , false, true , true , Report),
        delivered(RetryableStatus    , true , false, false, Report),
        delivered(RetryableStatus    , true , false, true , Latch(AckRetriesExhausted)),
        delivered(RetryableStatus    , true , true , false, Report),
        delivered(RetryableStatus    , true , true , true , Latch(DeadlineExpired)),
        delivered(TransportNotSent   , false, false, false, Report),
        delivered(TransportNotSent   , false, false, true , Report),
        delivered(TransportNotSent   , false, true , false, Report),
        delivered(TransportNotSent   , false, true , true , Report),
        delivered(TransportNotSent   , true , false, false, Report),
        delivered(TransportNotSent   , true , false, true , Latch(AckRetriesExhausted)),
        delivered(TransportNotSent   , true , true , false, Report),
        delivered(TransportNotSent   , true , true , true , Latch(DeadlineExpired)),
        delivered(AttemptResult::LocalExhaustion, false, false, false, Report),
        delivered(AttemptResult::LocalExhaustion, false, false, true , Report),
        delivered(AttemptResult::LocalExhaustion, false, true , false, Report),
        delivered(AttemptResult::LocalExhaustion, false, true , true , Report),
        delivered(AttemptResult::LocalExhaustion, true , false, false, Report),
        delivered(AttemptResult::LocalExhaustion, true , false, true , Latch(FatalCategory::LocalExhaustion)),
        delivered(AttemptResult::LocalExhaustion, true , true , false, Report),
        delivered(AttemptResult::LocalExhaustion, true , true , true , Latch(DeadlineExpired)),
        delivered(TransportAfterWrite, false, false, false, Report),
        delivered(TransportAfterWrite, false, false, true , Report),
        delivered(TransportAfterWrite, false, true , false, Report),
        delivered(TransportAfterWrite, false, true , true , Report),
        delivered(TransportAfterWrite, true , false, false, Report),
        delivered(TransportAfterWrite, true , false, true , Latch(AckConnectionLost)),
        delivered(TransportAfterWrite, true , true , false, Report),
        delivered(TransportAfterWrite, true , true , true , Latch(DeadlineExpired)),
        delivered(Timeout            , false, false, false, Report),
        delivered(Timeout            , false, false, true , Report),
        delivered(Timeout            , false, true , false, Report),
        delivered(Timeout            , false, true , true , Report),
        delivered(Timeout            , true , false, false, Report),
        delivered(Timeout            , true , false, true , Latch(AckTimeout)),
        delivered(Timeout            , true , true , false, Report),
        delivered(Timeout            , true , true , true , Latch(DeadlineExpired)),
        delivered(Cancelled          , false, false, false, Report),
        delivered(Cancelled          , false, false, true , Report),
        delivered(Cancelled          , false, true , false, Report),
        delivered(Cancelled          , false, true , true , Report),
        delivered(Cancelled          , true , false, false, Report),
        delivered(Cancelled          , true , false, true , Latch(StoppedBeforeAck)),
        delivered(Cancelled          , true , true , false, Report),
        delivered(Cancelled          , true , true , true , Latch(DeadlineExpired)),
        // too_large(leg, deadline_passed, strict, expected)
        too_large(NotSent  , false, false, Report),
        too_large(NotSent  , false, true , Report),
        too_large(NotSent  , true , false, Report),
        too_large(NotSent  , true , true , Report),
        too_large(Answered , false, false, TellTooLarge),
        too_large(Answered , false, true , LatchThenTellTooLarge(AckRejected)),
        too_large(Answered , true , false, Report),
        too_large(Answered , true , true , Latch(DeadlineExpired)),
        too_large(Abandoned, false, false, Report),
        too_large(Abandoned, false, true , Latch(AckRejected)),
        too_large(Abandoned, true , false, Report),
        too_large(Abandoned, true , true , Latch(DeadlineExpired)),
    ]
}

#[test]
fn every_combination_has_its_written_decision() {
    let rows = table();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(decide(row.situation), row.expected, "row {i}: {:?}", row.situation);
        if row.any_ambiguity_policy {
            let other = Situation {
                ambiguity_is_fatal: !row.situation.ambiguity_is_fatal,
                ..row.situation
            };
            assert_eq!(decide(other), row.expected, "row {i} with the other ambiguity policy");
        }
        if row.any_dispatched_leg {
            let Stage::Delivered {
                delivery,
                last_attempt,
                refused,
                ..
            } = row.situation.stage
            else {
                panic!("row {i}: only a delivery's row holds for any dispatched leg");
            };
            let other = Situation {
                stage: Stage::Delivered {
                    delivery,
                    last_attempt,
                    refused,
                    leg: Abandoned,
                },
                ..row.situation
            };
            assert_eq!(decide(other), row.expected, "row {i} with an abandoned leg");
        }
    }
}

#[test]
fn the_table_lists_every_combination_once() {
    let rows = table();
    // Legs: 3 outcomes x cut x deadline x strict x policy; deliveries: 9 attempts x
    // dispatched x deadline x strict; too large: 3 outcomes x deadline x strict.
    assert_eq!(rows.len(), 3 * 2 * 2 * 2 * 2 + 9 * 2 * 2 * 2 + 3 * 2 * 2);
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        assert!(
            seen.insert(format!("{:?}", row.situation)),
            "duplicate row {:?}",
            row.situation
        );
    }
}

#[test]
fn nothing_that_was_not_dispatched_ever_latches() {
    for row in table() {
        let not_dispatched = match row.situation.stage {
            Stage::LegEnded { outcome, .. } => outcome == NotSent,
            Stage::Delivered { leg, .. } => leg == NotSent,
        };
        if not_dispatched {
            assert!(
                !matches!(row.expected, Latch(_) | LatchThenTell(_) | LatchThenTellTooLarge(_)),
                "{:?} latches",
                row.situation
            );
        }
    }
}

#[test]
fn default_mode_never_latches() {
    for row in table().into_iter().filter(|r| !r.situation.strict) {
        assert!(
            !matches!(row.expected, Latch(_) | LatchThenTell(_) | LatchThenTellTooLarge(_)),
            "{:?}",
            row.situation
        );
    }
}

#[test]
fn last_attempts_map_to_deliveries_and_categories() {
    use crate::control::Delivery;
    use AttemptResult as A;
    let table = [
        (A::Ok, Delivery::Acked, None),
        (A::NotFound, Delivery::NotFound, Some(FatalCategory::AckNotFound)),
        (A::RejectedStatus, Delivery::Rejected, Some(FatalCategory::AckRejected)),
        (
            A::RetryableStatus,
            Delivery::Ambiguous,
            Some(FatalCategory::AckRetriesExhausted),
        ),
        (
            A::TransportNotSent,
            Delivery::Ambiguous,
            Some(FatalCategory::AckRetriesExhausted),
        ),
        (
            A::TransportAfterWrite,
            Delivery::Ambiguous,
            Some(FatalCategory::AckConnectionLost),
        ),
        (A::Timeout, Delivery::Ambiguous, Some(FatalCategory::AckTimeout)),
        (A::Cancelled, Delivery::Ambiguous, Some(FatalCategory::StoppedBeforeAck)),
        (
            A::LocalExhaustion,
            Delivery::Ambiguous,
            Some(FatalCategory::LocalExhaustion),
        ),
    ];
    for (a, delivery, category) in table {
        assert_eq!(a.final_delivery(), delivery, "{a:?}");
        assert_eq!(fatal_category(a), category, "{a:?}");
    }
    // The gateway's own exhaustion is named as such, never as the control plane's.
    let words = fatal_category(A::LocalExhaustion).unwrap().explanation();
    assert!(words.contains(crate::descriptors::EXHAUSTION_WORDS), "{words}");
    assert!(!words.contains("control plane"), "{words}");
}

const STRICT: Rules = Rules {
    strict: true,
    ambiguity_is_fatal: true,
};

#[test]
fn an_admitted_command_whose_deadline_passed_before_dispatch_is_dropped_unsent() {
    for rules in [
        STRICT,
        Rules {
            strict: false,
            ambiguity_is_fatal: true,
        },
    ] {
        assert!(matches!(BeforeDispatch::new(rules).start(true), Start::Expired));
        assert!(matches!(BeforeDispatch::new(rules).start(false), Start::Run(_)));
    }
}

/// Walks the states as the driver does: start, leg, delivery.
fn walk(
    rules: Rules,
    outcome: LegOutcome,
    delivery: crate::control::Delivery,
    last: AttemptResult,
) -> (bool, AfterDelivery) {
    let Start::Run(running) = BeforeDispatch::new(rules).start(false) else {
        panic!("the deadline has not passed");
    };
    let AfterLeg::Deliver { within_cleanup, next } = running.leg_ended(outcome, false, false) else {
        panic!("{outcome:?} is delivered");
    };
    assert!(!within_cleanup);
    let dispatched = next.dispatched();
    (dispatched, next.delivered(delivery, last, None, false))
}

#[test]
fn the_delivery_state_remembers_whether_the_leg_dispatched() {
    use crate::control::Delivery::{Acked, NotFound as Nf};
    let table = [
        (STRICT, Answered, Acked, Ok, true, AfterDelivery::Done),
        (STRICT, Answered, Nf, A404, true, AfterDelivery::Latch(AckNotFound)),
        (STRICT, LegOutcome::NotSent, Nf, A404, false, AfterDelivery::Report),
        (
            Rules {
                strict: false,
                ambiguity_is_fatal: true,
            },
            Answered,
            Nf,
            A404,
            true,
            AfterDelivery::Report,
        ),
    ];
    for (rules, outcome, delivery, last, dispatched, after) in table {
        assert_eq!(
            walk(rules, outcome, delivery, last),
            (dispatched, after),
            "{rules:?} {outcome:?}"
        );
    }
}

use AttemptResult::NotFound as A404;

#[test]
fn a_cut_leg_that_sent_nothing_is_delivered_within_the_cleanup_time() {
    let Start::Run(running) = BeforeDispatch::new(STRICT).start(false) else {
        panic!("the deadline has not passed");
    };
    assert!(matches!(
        running.leg_ended(LegOutcome::NotSent, true, false),
        AfterLeg::Deliver {
            within_cleanup: true,
            ..
        }
    ));
}

#[test]
fn an_abandoned_step_of_the_gateway_latches_only_where_an_abandoned_leg_would() {
    for strict in [false, true] {
        for ambiguity_is_fatal in [false, true] {
            for cut in [false, true] {
                for deadline_passed in [false, true] {
                    let rules = Rules {
                        strict,
                        ambiguity_is_fatal,
                    };
                    let got = match (Running { rules }).own_step_abandoned(cut, deadline_passed) {
                        AfterLeg::Deliver { within_cleanup, next } => {
                            assert!(!next.dispatched(), "the command's own request was not sent");
                            if within_cleanup {
                                DeliverWithinCleanup
                            } else {
                                Deliver
                            }
                        }
                        AfterLeg::Silent => Silent,
                        AfterLeg::Latch(c) => Latch(c),
                        AfterLeg::LatchThenTell(c) => LatchThenTell(c),
                    };
                    let expected = match (strict && ambiguity_is_fatal, deadline_passed, cut) {
                        (true, true, _) => Latch(DownstreamAmbiguous),
                        (true, false, _) => LatchThenTell(DownstreamAmbiguous),
                        (false, true, _) => Silent,
                        (false, false, true) => DeliverWithinCleanup,
                        (false, false, false) => Deliver,
                    };
                    assert_eq!(
                        got, expected,
                        "strict={strict} fatal={ambiguity_is_fatal} cut={cut} deadline={deadline_passed}"
                    );
                    assert_eq!(
                        rules.own_step_abandoned(),
                        (strict && ambiguity_is_fatal).then_some(DownstreamAmbiguous)
                    );
                }
            }
        }
    }
}

#[test]
fn only_the_mcp_servers_own_answer_refused_as_too_large_is_replaced_by_an_error() {
    for row in table() {
        let Stage::Delivered { refused, leg, .. } = row.situation.stage else {
            continue;
        };
        if matches!(row.expected, TellTooLarge | LatchThenTellTooLarge(_)) {
            assert_eq!(refused, Some(Refused::TooLarge), "{:?}", row.situation);
            assert_eq!(leg, Answered, "{:?}", row.situation);
            assert!(!row.situation.deadline_passed, "{:?}", row.situation);
        }
    }
}
