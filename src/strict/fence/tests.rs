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
    assert_eq!(fatal.category, FatalCategory::AckTimeout);
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
    assert_eq!(second.category, FatalCategory::AckNotFound);
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
    for round in 0..50 {
        let fence = Fence::new(true, 1);
        let after_latch = Arc::new(AtomicUsize::new(0));
        let latched_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in 0..32 {
            let fence = fence.clone();
            let after_latch = after_latch.clone();
            let latched_flag = latched_flag.clone();
            tasks.push(tokio::spawn(async move {
                while let Ok(adm) = fence.admit(cmd(&format!("r{i}"))).await {
                    // The latch is visible to recheck the moment the flag is set.
                    if latched_flag.load(Ordering::SeqCst) && adm.recheck().is_ok() {
                        after_latch.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(round % 3)).await;
        fence.latch(FatalCategory::AckTimeout, &cmd("x"));
        latched_flag.store(true, Ordering::SeqCst);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(after_latch.load(Ordering::SeqCst), 0, "round {round}");
        assert_eq!(fence.admit(cmd("late")).await.err(), Some(Refusal::Latched));
    }
}

#[tokio::test]
async fn a_panic_while_holding_a_strict_permit_latches_internal_error() {
    let fence = Fence::new(true, 1);
    let admission = fence.admit(cmd("a")).await.unwrap();
    let joined = tokio::spawn(async move {
        let _held = admission;
        panic!("simulated failure after dispatch");
    })
    .await;
    assert!(joined.is_err());
    assert_eq!(fence.fatal().unwrap().category, FatalCategory::InternalError);
    assert_eq!(fence.admit(cmd("b")).await.err(), Some(Refusal::Latched));
}

#[test]
#[should_panic(expected = "exactly one")]
fn a_strict_fence_with_more_permits_is_a_programming_error() {
    let _ = Fence::new(true, 2);
}
