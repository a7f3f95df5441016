//! The admission line on tokio's paused clock: deadlines and the stop end a wait at the
//! fence exactly when they should.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{admit_loop, AdmitRequest, Admitted};
use crate::strict::{CommandRef, Fence, Refusal};
use crate::supervisor::TaskEnd;

fn request(id: &str, deadline: Option<Instant>) -> (AdmitRequest, oneshot::Receiver<Admitted>) {
    let (reply, rx) = oneshot::channel();
    (
        AdmitRequest {
            command: CommandRef::new(id, "main", Some("tools/call")),
            deadline,
            reply,
        },
        rx,
    )
}

#[tokio::test(start_paused = true)]
async fn a_command_waiting_at_a_held_fence_expires_exactly_at_its_deadline_and_the_next_is_admitted() {
    let fence = Fence::new(true, 1);
    let holder = fence.admit(CommandRef::new("holder", "main", None)).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let line = tokio::spawn(admit_loop(fence.clone(), rx, stop.clone()));
    let started = Instant::now();
    let (first, first_rx) = request("a", Some(started + Duration::from_secs(7)));
    let (second, second_rx) = request("b", None);
    tx.send(first).unwrap();
    tx.send(second).unwrap();
    assert!(matches!(first_rx.await.unwrap(), Admitted::Expired));
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(7),
        "expired at its deadline, not later"
    );
    // The head expired; the next waits for the permit and gets it when it is released.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(holder);
    assert!(matches!(second_rx.await.unwrap(), Admitted::Yes(_)));
    assert_eq!(started.elapsed(), Duration::from_secs(8));
    stop.cancel();
    assert_eq!(line.await.unwrap(), TaskEnd::Finished);
}

#[tokio::test(start_paused = true)]
async fn the_stop_refuses_a_waiting_command_at_once_and_ends_the_line() {
    let fence = Fence::new(true, 1);
    let _holder = fence.admit(CommandRef::new("holder", "main", None)).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let line = tokio::spawn(admit_loop(fence, rx, stop.clone()));
    let (waiting, waiting_rx) = request("a", None);
    tx.send(waiting).unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let started = Instant::now();
    stop.cancel();
    assert!(matches!(
        waiting_rx.await.unwrap(),
        Admitted::Refused(Refusal::Stopping)
    ));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(line.await.unwrap(), TaskEnd::Finished);
}

#[tokio::test(start_paused = true)]
async fn a_closed_admission_line_is_an_unexpected_end() {
    let (tx, rx) = mpsc::unbounded_channel::<AdmitRequest>();
    drop(tx);
    let end = admit_loop(Fence::new(false, 2), rx, CancellationToken::new()).await;
    assert!(matches!(end, TaskEnd::Unexpected(_)));
}
