//! Model check of the admission line with shuttle: the real [`admit_loop`] and the
//! production fence, under the interleavings shuttle chooses between the poll loop placing
//! commands in line, the commands' tasks waiting for their turn, the holder of the permit
//! releasing it, and a latch.
//!
//! The admitter takes the production `Fence` (tokio's semaphore, std's mutex): to shuttle
//! those are opaque, atomic steps (tokio checks its semaphore with loom), and tasks switch
//! wherever they wait. The fence's own inner windows are explored on shuttle's primitives
//! in `strict/fence/model_tests.rs`, with the same budget and seeds.
//!
//! Checked: admissions are granted strictly in receipt order; a released permit admits
//! exactly one waiter (never two at once, none skipped); after a latch nothing is admitted
//! and every later command is answered `Refused(Latched)`; every command gets an answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{admit_loop, AdmitRequest, Admitted};
use crate::strict::{explore_model, CommandRef, FatalCategory, Fence, Refusal};
use crate::supervisor::TaskEnd;

/// Who latches while commands wait in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Latch {
    Nobody,
    /// The holder, before it releases (a command's own fatal outcome).
    Holder,
    /// The task-failure hook, at any moment.
    Outside,
}

/// What a command's task was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Admitted(usize),
    Refused(usize, Refusal),
    Expired(usize),
}

#[test]
fn the_admitter_grants_in_receipt_order_one_at_a_time_and_nothing_after_a_latch() {
    for latch in [Latch::Nobody, Latch::Holder, Latch::Outside] {
        explore_model(move || {
            shuttle::future::block_on(async move {
                let fence = Fence::new(true, 1);
                let holder = fence
                    .admit(CommandRef::new("holder", "main", None))
                    .await
                    .expect("the first admission");
                let (line, rx) = mpsc::unbounded_channel();
                let stop = CancellationToken::new();
                let admitter = shuttle::future::spawn(admit_loop(fence.clone(), rx, stop.clone()));

                let answers = Arc::new(Mutex::new(Vec::new()));
                let inside = Arc::new(AtomicUsize::new(1)); // the holder
                let mut tasks = Vec::new();
                // The poll loop places the commands of one poll in the order received.
                for i in 0..3 {
                    let (reply, placed) = oneshot::channel();
                    line.send(AdmitRequest {
                        command: CommandRef::new(&format!("r{i}"), "main", Some("tools/call")),
                        deadline: None,
                        reply,
                    })
                    .expect("the admitter is running");
                    let (answers, inside) = (answers.clone(), inside.clone());
                    tasks.push(shuttle::future::spawn(async move {
                        match placed.await.expect("every command is answered") {
                            Admitted::Yes(admission) => {
                                let before = inside.fetch_add(1, Ordering::SeqCst);
                                assert_eq!(before, 0, "r{i} admitted while the permit was held");
                                answers.lock().expect("ghost").push(Answer::Admitted(i));
                                shuttle::future::yield_now().await;
                                inside.fetch_sub(1, Ordering::SeqCst);
                                drop(admission);
                            }
                            Admitted::Refused(refusal) => {
                                answers.lock().expect("ghost").push(Answer::Refused(i, refusal))
                            }
                            Admitted::Expired => answers.lock().expect("ghost").push(Answer::Expired(i)),
                        }
                    }));
                    shuttle::future::yield_now().await;
                }
                tasks.push(shuttle::future::spawn({
                    let inside = inside.clone();
                    async move {
                        shuttle::future::yield_now().await;
                        if latch == Latch::Holder {
                            holder.latch(FatalCategory::AckTimeout);
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(holder);
                    }
                }));
                if latch == Latch::Outside {
                    let fence = fence.clone();
                    tasks.push(shuttle::future::spawn(async move {
                        fence.latch(FatalCategory::InternalError, &CommandRef::default());
                    }));
                }
                for task in tasks {
                    task.await.expect("no task panicked");
                }
                stop.cancel();
                assert_eq!(admitter.await.expect("the admitter ended"), TaskEnd::Finished);

                let answers = answers.lock().expect("ghost").clone();
                assert_eq!(answers.len(), 3, "{latch:?}: every command was answered: {answers:?}");
                let admitted: Vec<usize> = answers
                    .iter()
                    .filter_map(|a| match a {
                        Answer::Admitted(i) => Some(*i),
                        _ => None,
                    })
                    .collect();
                // In receipt order, and a prefix of it: once one is refused, all later are.
                let prefix: Vec<usize> = (0..admitted.len()).collect();
                assert_eq!(
                    admitted, prefix,
                    "{latch:?}: admitted out of receipt order: {answers:?}"
                );
                for answer in &answers {
                    if let Answer::Refused(_, refusal) = answer {
                        assert_eq!(*refusal, Refusal::Latched, "{latch:?}: {answers:?}");
                    }
                    assert!(!matches!(answer, Answer::Expired(_)), "no deadline was set");
                }
                match latch {
                    Latch::Nobody => assert_eq!(admitted.len(), 3, "{answers:?}"),
                    Latch::Holder => assert!(admitted.is_empty(), "admitted after the holder latched: {answers:?}"),
                    Latch::Outside => {}
                }
                assert_eq!(fence.fatal().is_some(), latch != Latch::Nobody);
            });
        });
    }
}
