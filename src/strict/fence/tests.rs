use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

fn cmd(id: &str) -> CommandRef {
    CommandRef::new(id, "main", Some("tools/call"))
}

#[tokio::test]
async fn strict_fence_admits_one_command_at_a_time() {
    let fence = Fence::new(true, 1);
    let first = fence.admit(cmd("a")).await.unwrap();
    let second = tokio::time::timeout(Duration::from_millis(50), fence.admit(cmd("b"))).await;
    assert!(
        second.is_err(),
        "a second admission must wait while the first holds the permit"
    );
    assert!(fence.snapshot().held);
    drop(first);
    assert!(!fence.snapshot().held);
    let _second = fence.admit(cmd("b")).await.unwrap();
}

#[tokio::test]
async fn latch_refuses_waiters_and_rechecks() {
    let fence = Fence::new(true, 1);
    let holder = fence.admit(cmd("a")).await.unwrap();
    let waiter = tokio::spawn({
        let fence = fence.clone();
        async move { fence.admit(cmd("b")).await.map(|_| ()) }
    });
    tokio::task::yield_now().await;
    let fatal = holder.latch(FatalCategory::AckTimeout);
    assert!(fatal.first);
    assert_eq!(fatal.fatal.category, FatalCategory::AckTimeout);
    assert_eq!(holder.recheck(), Err(Refusal::Latched));
    assert_eq!(waiter.await.unwrap(), Err(Refusal::Latched));
    drop(holder);
    assert_eq!(fence.admit(cmd("c")).await.err(), Some(Refusal::Latched));
}

#[tokio::test]
async fn the_first_cause_wins_and_never_clears() {
    let fence = Fence::new(true, 1);
    fence.latch(FatalCategory::AckNotFound, &cmd("a"));
    let second = fence.latch(FatalCategory::StoppedBeforeAck, &cmd("b"));
    assert!(!second.first);
    assert_eq!(second.fatal.category, FatalCategory::AckNotFound);
    assert_eq!(fence.fatal().unwrap().request_id.as_deref(), Some("a"));
    assert!(fence.latched_token().is_cancelled());
}

#[tokio::test]
async fn stopping_refuses_new_admissions_but_keeps_admitted_ones() {
    let fence = Fence::new(false, 4);
    let admitted = fence.admit(cmd("a")).await.unwrap();
    fence.stop_admitting();
    assert_eq!(fence.admit(cmd("b")).await.err(), Some(Refusal::Stopping));
    assert_eq!(admitted.recheck(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_admission_is_ever_granted_after_the_latch() {
    // The latch is set by a holder of the only permit, and `LATCHED` is raised before that
    // holder lets go: any admission granted afterwards sees it, whatever the scheduling.
    for round in 0..50u64 {
        let fence = Fence::new(true, 1);
        let latched = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let granted = Arc::new(AtomicUsize::new(0));
        let granted_after_latch = Arc::new(AtomicUsize::new(0));
        let latch_at = 5 + (round as usize % 20);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let fence = fence.clone();
            let (latched, granted, after) = (latched.clone(), granted.clone(), granted_after_latch.clone());
            tasks.push(tokio::spawn(async move {
                while let Ok(adm) = fence.admit(cmd(&format!("r{i}"))).await {
                    if latched.load(Ordering::SeqCst) {
                        after.fetch_add(1, Ordering::SeqCst);
                    }
                    if granted.fetch_add(1, Ordering::SeqCst) + 1 == latch_at {
                        adm.latch(FatalCategory::AckTimeout);
                        latched.store(true, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    drop(adm);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(latched.load(Ordering::SeqCst), "round {round}: the latch was reached");
        assert_eq!(granted_after_latch.load(Ordering::SeqCst), 0, "round {round}");
        assert_eq!(granted.load(Ordering::SeqCst), latch_at, "round {round}");
        assert_eq!(fence.admit(cmd("late")).await.err(), Some(Refusal::Latched));
    }
}

/// Panics in a task that holds `admission`, as a failure after dispatch would.
async fn panic_holding(admission: Admission) {
    let joined = tokio::spawn(async move {
        let _held = admission;
        panic!("simulated failure after dispatch");
    })
    .await;
    assert!(joined.is_err());
}

#[tokio::test]
async fn every_latch_reports_once_to_the_observer_whoever_latches() {
    let fence = Fence::new(true, 1);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        fence.observe_latches(Box::new(move |f| seen.lock().unwrap().push(f.category)));
    }
    let admission = fence.admit(cmd("a")).await.unwrap();
    // A panic while holding the permit is the first latch: it reports.
    panic_holding(admission).await;
    let later = fence.latch(FatalCategory::StoppedBeforeAck, &cmd("b"));
    assert!(!later.first);
    assert_eq!(later.fatal.category, FatalCategory::InternalError);
    assert_eq!(*seen.lock().unwrap(), vec![FatalCategory::InternalError]);
}

#[tokio::test]
async fn a_strict_stop_refuses_an_admission_that_sent_nothing_but_not_one_that_sent() {
    let fence = Fence::new(true, 1);
    let quiet = fence.admit(cmd("a")).await.unwrap();
    fence.stop_admitting();
    assert_eq!(quiet.recheck(), Err(Refusal::Stopping));
    assert_eq!(quiet.begin_send(), Err(Refusal::Stopping));
    assert!(!quiet.is_sent());
    assert_eq!(fence.latch_if_sent_on_stop(), None, "nothing sent: the stop is clean");
    assert!(fence.fatal().is_none());
    drop(quiet);

    let fence = Fence::new(true, 1);
    let sending = fence.admit(cmd("b")).await.unwrap();
    sending.begin_send().unwrap();
    fence.stop_admitting();
    assert_eq!(sending.recheck(), Ok(()), "a sent request may still be read or resumed");
    let latched = fence.latch_if_sent_on_stop().expect("sent and unacknowledged");
    assert_eq!(latched.fatal.category, FatalCategory::StoppedBeforeAck);
    assert_eq!(latched.fatal.request_id.as_deref(), Some("b"));
}

#[tokio::test]
async fn a_default_stop_lets_admitted_commands_send() {
    let fence = Fence::new(false, 2);
    let admitted = fence.admit(cmd("a")).await.unwrap();
    fence.stop_admitting();
    assert_eq!(admitted.begin_send(), Ok(()));
    assert_eq!(fence.latch_if_sent_on_stop(), None);
}

#[tokio::test]
async fn a_connection_made_after_the_stop_is_refused_and_nothing_counts_as_sent() {
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("a")).await.unwrap();
    let wire = admission.wire();
    wire.connecting();
    fence.stop_admitting();
    assert_eq!(fence.latch_if_sent_on_stop(), None, "connecting is not sending");
    assert_eq!(wire.connected(), Err(Refusal::Stopping));
    wire.handed_over();
    assert!(!admission.is_sent(), "a refused connection stays unsent");
}

#[tokio::test]
async fn a_connection_made_in_time_marks_the_request_sent_and_stays_sent() {
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("a")).await.unwrap();
    let wire = admission.wire();
    wire.connecting();
    assert!(!admission.is_sent());
    wire.connected().unwrap();
    assert!(admission.is_sent());
    // A later connect of the same leg (a resume) does not make it unsent again.
    wire.connecting();
    assert!(admission.is_sent());

    let other = Fence::new(true, 1);
    let pooled = other.admit(cmd("b")).await.unwrap();
    pooled.wire().handed_over();
    assert!(
        pooled.is_sent(),
        "no connect started: it went out on a pooled connection"
    );
}

#[tokio::test]
async fn a_panic_while_holding_a_strict_permit_latches_internal_error() {
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("a")).await.unwrap();
    panic_holding(admission).await;
    assert_eq!(fence.fatal().unwrap().category, FatalCategory::InternalError);
    assert_eq!(fence.admit(cmd("b")).await.err(), Some(Refusal::Latched));
}

#[test]
#[should_panic(expected = "exactly one")]
fn a_strict_fence_with_more_permits_is_a_programming_error() {
    let _ = Fence::new(true, 2);
}

#[tokio::test]
async fn a_hand_over_counts_as_sent_for_a_stop_until_a_new_connection_is_reported() {
    // Handed over, then stopped: it may be on a pooled connection already.
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("a")).await.unwrap();
    let wire = admission.wire();
    wire.hand_over().unwrap();
    assert!(admission.is_sent());
    fence.stop_admitting();
    let latched = fence
        .latch_if_sent_on_stop()
        .expect("a handed-over request may have left");
    assert_eq!(latched.fatal.category, FatalCategory::StoppedBeforeAck);
    drop(admission);

    // Handed over, a new connection started for it, then stopped: nothing has left, and
    // the connection is refused.
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("b")).await.unwrap();
    let wire = admission.wire();
    wire.hand_over().unwrap();
    wire.connecting();
    wire.handed_over();
    fence.stop_admitting();
    assert_eq!(fence.latch_if_sent_on_stop(), None, "connecting is not sending");
    assert_eq!(wire.connected(), Err(Refusal::Stopping));
    assert!(!admission.is_sent());

    // After a stop, a hand-over of a request that sent nothing is refused.
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("c")).await.unwrap();
    fence.stop_admitting();
    assert_eq!(admission.wire().hand_over(), Err(Refusal::Stopping));
    assert!(!admission.is_sent());
}

#[test]
fn every_wire_state_round_trips_through_its_cell_bits() {
    use WireState as W;
    for state in [W::None, W::Connecting, W::Sent, W::Handing] {
        assert_eq!(W::from_bits(state.bits()), state);
    }
    let left: Vec<bool> = [W::None, W::Connecting, W::Sent, W::Handing]
        .iter()
        .map(|s| s.may_have_left())
        .collect();
    assert_eq!(left, [false, false, true, true]);
}

#[test]
fn the_fence_leg_serializes_as_its_label() {
    for leg in [FenceLeg::Downstream, FenceLeg::Deliver] {
        assert_eq!(serde_json::to_value(leg).unwrap(), leg.as_str());
    }
}
