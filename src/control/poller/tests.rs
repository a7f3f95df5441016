//! The poll retry policy, and the loop's pauses, on tokio's paused clock.

use std::cell::Cell;
use std::time::Duration;

use super::*;
use crate::app::GatewayLabels;
use crate::control::ControlSettings;

fn poller() -> Poller {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    let settings = ControlSettings {
        // Nothing listens there; these tests never send a poll.
        base_url: "http://127.0.0.1:9".to_owned(),
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(30),
        post_timeout: Duration::from_secs(10),
        post_attempts: 3,
        server_info: None,
        routing_correction: false,
        initial_poll_timeout: None,
        http2: false,
    };
    let client = ControlClient::new(settings, "i", metrics.clone()).unwrap();
    Poller::new(client, metrics, (Duration::from_secs(5), Duration::from_secs(5)))
}

fn error(kind: PollErrorKind, retry_after: Option<Duration>) -> PollError {
    PollError::new(kind, None, retry_after)
}

#[test]
fn polls_are_quick_until_one_succeeds_and_again_after_each_failure() {
    let mut p = poller();
    assert_eq!(p.wait(), PollWait::Quick, "the first poll of a run");
    p.succeeded = true;
    assert_eq!(p.wait(), PollWait::Long);
    p.retry(&error(PollErrorKind::Transport, None), 0.0);
    assert_eq!(p.wait(), PollWait::Quick, "the first poll after a failure");
    p.backoff.reset();
    assert_eq!(p.wait(), PollWait::Long);
}

#[test]
fn refused_credentials_wait_at_least_the_floor_and_need_an_operator() {
    let mut p = poller();
    let retry = p.retry(&error(PollErrorKind::Unauthorized, None), 0.0);
    assert_eq!(retry.delay, UNAUTHORIZED_FLOOR);
    assert!(retry.needs_operator);
    let other = p.retry(&error(PollErrorKind::ServerError, None), 0.0);
    assert!(other.delay < UNAUTHORIZED_FLOOR);
    assert!(!other.needs_operator);
}

#[test]
fn retry_after_is_a_floor_on_the_backoff() {
    let mut p = poller();
    let floor = Duration::from_secs(7);
    let retry = p.retry(&error(PollErrorKind::RateLimited, Some(floor)), 0.5);
    assert_eq!(retry.delay, floor);
    // Doubling from 200 ms with no jitter: 100 ms (half of 200), then 200 ms.
    let mut q = poller();
    assert_eq!(
        q.retry(&error(PollErrorKind::Timeout, None), 0.0).delay,
        Duration::from_millis(100)
    );
    assert_eq!(
        q.retry(&error(PollErrorKind::Timeout, None), 0.0).delay,
        Duration::from_millis(200)
    );
}

/// A sink that is always full, and counts how often it was asked.
struct Full {
    asked: Cell<u32>,
}

impl PollSink for Full {
    fn free_slots(&self) -> usize {
        self.asked.set(self.asked.get() + 1);
        0
    }
    async fn room(&self) {
        std::future::pending::<()>().await;
    }
    fn polled(&self, _: Polled) {
        panic!("a full sink is never polled for");
    }
    fn poll_failed(&self, _: &PollError) {
        panic!("a full sink is never polled for");
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_sink_is_never_polled_for_and_the_stop_ends_the_wait() {
    let sink = Full { asked: Cell::new(0) };
    let stop = CancellationToken::new();
    let latched = CancellationToken::new();
    let run = poller().run(&sink, &stop, &latched);
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        stop.cancel();
    };
    tokio::join!(run, stopper);
    assert_eq!(sink.asked.get(), 1, "asked once, then waited for room");
}

#[tokio::test(start_paused = true)]
async fn a_latch_ends_the_wait_for_room_too() {
    let sink = Full { asked: Cell::new(0) };
    let stop = CancellationToken::new();
    let latched = CancellationToken::new();
    latched.cancel();
    poller().run(&sink, &stop, &latched).await;
    assert_eq!(
        sink.asked.get(),
        0,
        "latched before the first poll: not even the room is asked"
    );
}

/// A sink with room whose poll gate stays closed (a replica whose term has lapsed by its
/// own clock): a poll would reach the closed port and fail, which panics here.
struct Gated {
    asked: Cell<u32>,
}

impl PollSink for Gated {
    fn free_slots(&self) -> usize {
        25
    }
    async fn room(&self) {}
    fn polled(&self, _: Polled) {
        panic!("a poll was sent through a closed gate");
    }
    fn poll_failed(&self, _: &PollError) {
        panic!("a poll was sent through a closed gate");
    }
    fn may_poll(&self) -> bool {
        self.asked.set(self.asked.get() + 1);
        false
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_sends_no_poll_however_long_it_stays_closed_and_the_stop_ends_the_wait() {
    let sink = Gated { asked: Cell::new(0) };
    let stop = CancellationToken::new();
    let latched = CancellationToken::new();
    let run = poller().run(&sink, &stop, &latched);
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        stop.cancel();
    };
    tokio::join!(run, stopper);
    // Asked before every poll it would have sent: every GATE_RECHECK for a minute.
    let expected = (60_000 / GATE_RECHECK.as_millis()) as u32;
    assert!(sink.asked.get() >= expected, "asked {} times", sink.asked.get());
}
