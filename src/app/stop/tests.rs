use super::*;
use crate::strict::{CommandRef, FatalCategory};
use crate::supervisor::{TaskEnd, TaskKind};

use Action as A;
use Event as E;
use Phase as P;

const PHASES: [Phase; 9] = [
    P::Running,
    P::Grace,
    P::GraceOver,
    P::Cut,
    P::HardStop,
    P::Fatal,
    P::FatalHardStop,
    P::Done(End::Clean),
    P::Done(End::Fatal),
];
const EVENTS: [Event; 5] = [E::StopRequested, E::Latched, E::Drained, E::TimeUp, E::Unlatched];

/// Every phase x event, with the next phase and the action (ignored pairs stay put and
/// do nothing).
#[rustfmt::skip]
const TABLE: [(Phase, Event, Phase, Action); 45] = [
    (P::Running, E::StopRequested, P::Grace, A::BeginGrace),
    (P::Running, E::Latched, P::Fatal, A::BeginFatal),
    (P::Running, E::Drained, P::Running, A::None),
    (P::Running, E::TimeUp, P::Running, A::None),
    (P::Running, E::Unlatched, P::Running, A::None),

    (P::Grace, E::StopRequested, P::GraceOver, A::LatchIfSent),
    (P::Grace, E::Latched, P::Fatal, A::BeginFatal),
    (P::Grace, E::Drained, P::Cut, A::Cut),
    (P::Grace, E::TimeUp, P::GraceOver, A::LatchIfSent),
    (P::Grace, E::Unlatched, P::Grace, A::None),

    (P::GraceOver, E::StopRequested, P::GraceOver, A::None),
    (P::GraceOver, E::Latched, P::Fatal, A::BeginFatal),
    (P::GraceOver, E::Drained, P::GraceOver, A::None),
    (P::GraceOver, E::TimeUp, P::GraceOver, A::None),
    (P::GraceOver, E::Unlatched, P::Cut, A::WarnAndCut),

    (P::Cut, E::StopRequested, P::Cut, A::None),
    (P::Cut, E::Latched, P::Cut, A::None),
    (P::Cut, E::Drained, P::Done(End::Clean), A::FinishClean),
    (P::Cut, E::TimeUp, P::HardStop, A::HardStop),
    (P::Cut, E::Unlatched, P::Cut, A::None),

    (P::HardStop, E::StopRequested, P::HardStop, A::None),
    (P::HardStop, E::Latched, P::HardStop, A::None),
    (P::HardStop, E::Drained, P::Done(End::Clean), A::FinishClean),
    (P::HardStop, E::TimeUp, P::Done(End::Clean), A::FinishClean),
    (P::HardStop, E::Unlatched, P::HardStop, A::None),

    (P::Fatal, E::StopRequested, P::Fatal, A::None),
    (P::Fatal, E::Latched, P::Fatal, A::None),
    (P::Fatal, E::Drained, P::Done(End::Fatal), A::None),
    (P::Fatal, E::TimeUp, P::FatalHardStop, A::FatalHardStop),
    (P::Fatal, E::Unlatched, P::Fatal, A::None),

    (P::FatalHardStop, E::StopRequested, P::FatalHardStop, A::None),
    (P::FatalHardStop, E::Latched, P::FatalHardStop, A::None),
    (P::FatalHardStop, E::Drained, P::Done(End::Fatal), A::None),
    (P::FatalHardStop, E::TimeUp, P::Done(End::Fatal), A::None),
    (P::FatalHardStop, E::Unlatched, P::FatalHardStop, A::None),

    (P::Done(End::Clean), E::StopRequested, P::Done(End::Clean), A::None),
    (P::Done(End::Clean), E::Latched, P::Done(End::Clean), A::None),
    (P::Done(End::Clean), E::Drained, P::Done(End::Clean), A::None),
    (P::Done(End::Clean), E::TimeUp, P::Done(End::Clean), A::None),
    (P::Done(End::Clean), E::Unlatched, P::Done(End::Clean), A::None),

    (P::Done(End::Fatal), E::StopRequested, P::Done(End::Fatal), A::None),
    (P::Done(End::Fatal), E::Latched, P::Done(End::Fatal), A::None),
    (P::Done(End::Fatal), E::Drained, P::Done(End::Fatal), A::None),
    (P::Done(End::Fatal), E::TimeUp, P::Done(End::Fatal), A::None),
    (P::Done(End::Fatal), E::Unlatched, P::Done(End::Fatal), A::None),
];

#[test]
fn every_phase_and_event_moves_the_stop_as_the_table_says() {
    for (phase, event, next, action) in TABLE {
        assert_eq!(phase.next(event), (next, action), "{phase:?} x {event:?}");
    }
}

#[test]
fn the_table_covers_every_pair_once() {
    for phase in PHASES {
        for event in EVENTS {
            let rows = TABLE.iter().filter(|r| r.0 == phase && r.1 == event).count();
            assert_eq!(rows, 1, "{phase:?} x {event:?}");
        }
    }
}

#[test]
fn a_fatal_order_never_ends_clean_and_an_ended_stop_never_moves() {
    for (phase, event, next, _) in TABLE {
        if matches!(phase, P::Fatal | P::FatalHardStop | P::Done(End::Fatal)) {
            assert!(
                matches!(next, P::Fatal | P::FatalHardStop | P::Done(End::Fatal)),
                "{phase:?} x {event:?} -> {next:?}"
            );
        }
        if let P::Done(_) = phase {
            assert_eq!(next, phase);
        }
    }
}

/// Every event sequence the driver can produce ends in `Done` within a handful of steps:
/// no phase waits forever on an event that cannot come.
#[test]
fn each_reachable_phase_has_a_way_out_through_what_its_driver_waits_for() {
    // What the driver's `observe` can report in each phase.
    let observable = |p: Phase| -> &'static [Event] {
        match p {
            P::Running => &[E::StopRequested, E::Latched],
            P::Grace => &[E::StopRequested, E::Latched, E::Drained, E::TimeUp],
            P::GraceOver => &[E::Latched, E::Unlatched],
            P::Cut | P::HardStop | P::Fatal | P::FatalHardStop => &[E::Drained, E::TimeUp],
            P::Done(_) => &[],
        }
    };
    let mut frontier = vec![(P::Running, 0)];
    while let Some((phase, depth)) = frontier.pop() {
        assert!(depth <= 5, "a stop takes at most five steps ({phase:?})");
        for &event in observable(phase) {
            let (next, _) = phase.next(event);
            assert_ne!(next, phase, "{phase:?} x {event:?} must move on");
            frontier.push((next, depth + 1));
        }
    }
}

/// A driver over nothing: no channel, one supervisor, the given stop bounds.
fn order(
    fence: &Fence,
    supervisor: &Supervisor,
    latch_dir: &std::path::Path,
) -> (StopOrder, mpsc::UnboundedSender<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let order = StopOrder {
        cluster: None,
        bounds: StopBounds {
            shutdown_grace: Duration::from_secs(10),
            cleanup_timeout: Duration::from_secs(3),
            latch_file: latch_dir.join("latch.json"),
        },
        fence: fence.clone(),
        channels: Channels::default(),
        health: Arc::new(Health::default()),
        supervisor: supervisor.clone(),
        signals: StopSignals::new(),
        requests: rx,
    };
    (order, tx)
}

/// A drained task that ends when `token` fires.
fn command_until(supervisor: &Supervisor, token: &CancellationToken) {
    let token = token.clone();
    supervisor.spawn(TaskKind::Command, async move {
        token.cancelled().await;
        TaskEnd::Finished
    });
}

#[tokio::test(start_paused = true)]
async fn a_second_request_cuts_the_grace_short() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Fence::new(false, 4);
    let supervisor = Supervisor::logging_only();
    let (order, tx) = order(&fence, &supervisor, dir.path());
    command_until(&supervisor, &order.signals.cut);
    tx.send(()).unwrap();
    let started = Instant::now();
    let stop = tokio::spawn(order.run());
    tokio::time::sleep(Duration::from_secs(2)).await;
    tx.send(()).unwrap();
    let (outcome, signals, _) = stop.await.unwrap();
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(started.elapsed(), Duration::from_secs(2), "cut at the second request");
    assert!(signals.poll_stop.is_cancelled() && signals.cut.is_cancelled() && signals.hard_stop.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_latch_while_running_persists_and_cleans_up_within_the_cleanup_time() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Fence::new(true, 1);
    let supervisor = Supervisor::logging_only();
    let (order, _tx) = order(&fence, &supervisor, dir.path());
    // One command that stops only at the hard stop, and nothing else.
    command_until(&supervisor, &order.signals.hard_stop);
    fence.latch(FatalCategory::AckNotFound, &CommandRef::new("r", "main", None));
    let started = Instant::now();
    let (outcome, signals, _) = order.run().await;
    let RunOutcome::Fatal(fatal) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(fatal.category, FatalCategory::AckNotFound);
    assert!(fatal.persisted);
    assert!(dir.path().join("latch.json").exists(), "the latch file was written");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "hard-stopped at the cleanup bound"
    );
    assert!(signals.poll_stop.is_cancelled() && signals.cut.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_latch_during_the_grace_turns_the_stop_fatal_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Fence::new(true, 1);
    let supervisor = Supervisor::logging_only();
    let (order, tx) = order(&fence, &supervisor, dir.path());
    let done = CancellationToken::new();
    supervisor.spawn(TaskKind::Command, {
        let (fence, done) = (fence.clone(), done.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            fence.latch(FatalCategory::AckTimeout, &CommandRef::new("r", "main", None));
            done.cancelled().await;
            TaskEnd::Finished
        }
    });
    tx.send(()).unwrap();
    let started = Instant::now();
    let stop = tokio::spawn(order.run());
    tokio::time::sleep(Duration::from_secs(5)).await;
    done.cancel();
    let (outcome, _, _) = stop.await.unwrap();
    let RunOutcome::Fatal(fatal) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(fatal.category, FatalCategory::AckTimeout);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "the command ended within the cleanup time"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_ignores_every_signal_holds_the_stop_only_for_the_last_wait() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Fence::new(false, 4);
    let supervisor = Supervisor::logging_only();
    let (order, tx) = order(&fence, &supervisor, dir.path());
    supervisor.spawn(TaskKind::Command, std::future::pending::<TaskEnd>());
    tx.send(()).unwrap();
    let started = Instant::now();
    let (outcome, _, _) = order.run().await;
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(10) + Duration::from_secs(3) + LAST_WAIT
    );
}

#[tokio::test(start_paused = true)]
async fn a_latch_after_the_cut_still_ends_the_run_fatal_and_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Fence::new(true, 1);
    let supervisor = Supervisor::logging_only();
    let (order, tx) = order(&fence, &supervisor, dir.path());
    let cut = order.signals.cut.clone();
    // A command that ignores the grace, and latches only once the cut has come (as a
    // task failing in strict mode would, through the failure hook).
    supervisor.spawn(TaskKind::Command, {
        let fence = fence.clone();
        async move {
            cut.cancelled().await;
            fence.latch(FatalCategory::InternalError, &CommandRef::new("late", "main", None));
            TaskEnd::Finished
        }
    });
    tx.send(()).unwrap();
    let (outcome, _, _) = tokio::spawn(order.run()).await.unwrap();
    let RunOutcome::Fatal(fatal) = outcome else {
        panic!("a run that latched never reads as clean: {outcome:?}")
    };
    assert_eq!(fatal.category, FatalCategory::InternalError);
    assert!(fatal.persisted);
    let persisted = crate::strict::latch_file::read(&dir.path().join("latch.json")).unwrap();
    assert_eq!(persisted.map(|f| f.category), Some(FatalCategory::InternalError));
}
