//! Strict HA when a link to the control plane drops packets silently (a blackhole:
//! nothing refused, nothing reset, nothing answered), on a real etcd and real
//! `tunnelgate run` processes, with the default `control_plane.poll_timeout` (30 s): a
//! long poll open at the cut neither answers nor fails for that long, so only the
//! active's own reach checks (run whenever the control plane has been quiet for most of
//! a check interval) notice the cut in time.
//!
//! - the active's link blackholed: it turns not ready and steps down within
//!   `step_down_after` plus one check interval, the standby serves the commands queued
//!   meanwhile within the cut, nothing runs twice, and healed it does not flap back;
//! - both links blackholed: nobody steps down, both report the control plane unreachable,
//!   and the active is not ready, naming the reach check;
//! - the standby's link blackholed: it reports the control plane unreachable within its
//!   next check, and the active serves on, ready;
//! - the open poll of a stepped-down active is abandoned after `strict.shutdown_grace`
//!   and counted; a command handed to it in the cut is never run.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tunnelgate_test_peers::EtcdPeer;

use crate::harness::{wait_until, Gateway, Rig};
use crate::strict_ha::{assert_no_overlap, call, terminal_types, Recorder, Replica, BOUND, LEASE_TTL};

/// `coordination.step_down_after`'s default.
const DEFAULT_STEP_DOWN_AFTER: Duration = Duration::from_secs(10);
/// `coordination.step_down_after` where the default would make a test long.
const SHORT_STEP_DOWN_AFTER: Duration = Duration::from_secs(2);
/// `strict.shutdown_grace` in the rig's configuration (asserted in [`replica`]).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How long the first test's cut lasts.
const CUT: Duration = Duration::from_secs(20);
/// Slack on every measured bound, for a loaded machine.
const SLACK: Duration = Duration::from_secs(2);
/// How often a measured condition is looked at.
const LOOK: Duration = Duration::from_millis(200);

/// The check interval of `coord::reach`: a quarter of `step_down_after`, at least 1 s.
fn check_interval(step_down_after: Duration) -> Duration {
    (step_down_after / 4).max(Duration::from_secs(1))
}

/// The check loop's tick of `coord::reach`: a quarter of the interval, at least 250 ms.
fn tick(step_down_after: Duration) -> Duration {
    (check_interval(step_down_after) / 4).max(Duration::from_millis(250))
}

// ---------------------------------------------------------------------------------------
// A loopback forwarder that can drop everything silently
// ---------------------------------------------------------------------------------------

/// A TCP forwarder to `target`. Blackholed, it forwards no byte either way and closes or
/// resets nothing: what it reads is held (as a link that drops packets leaves the
/// sender retransmitting), a connection accepted meanwhile is carried nowhere, and a
/// close is held like a byte. Healed, it forwards again, what it held first.
struct Forwarder {
    addr: SocketAddr,
    open: watch::Sender<bool>,
    _accept: JoinHandle<()>,
}

impl Forwarder {
    async fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, watch) = watch::channel(true);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(carry(inbound, target, watch.clone()));
            }
        });
        Forwarder {
            addr,
            open,
            _accept: accept,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn blackhole(&self) {
        self.open.send_replace(false);
    }

    fn heal(&self) {
        self.open.send_replace(true);
    }
}

/// Carries one accepted connection to `target` (connected once the link is open).
async fn carry(inbound: TcpStream, target: SocketAddr, mut open: watch::Receiver<bool>) {
    if open.wait_for(|open| *open).await.is_err() {
        return;
    }
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::join!(pump(in_read, out_write, open.clone()), pump(out_read, in_write, open));
}

/// Copies `from` to `to`, each chunk (and the end) held while the link is blackholed.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut open: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if open.wait_for(|open| *open).await.is_err() {
            return;
        }
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Replicas
// ---------------------------------------------------------------------------------------

/// The simulator's address, from its base URL.
fn sim_addr(rig: &Rig) -> SocketAddr {
    rig.sim
        .base_url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// A replica with the default `poll_timeout` (the rig's is 1 s), `step_down_after` when
/// given (else the default), reaching the control plane through `forwarder` when given.
fn replica(
    rig: &Rig,
    etcd: &EtcdPeer,
    server: &Recorder,
    forwarder: Option<&Forwarder>,
    step_down_after: Option<Duration>,
) -> Replica {
    let mut r = Replica::new(rig, etcd, &server.url(), "");
    let short_poll = "poll_timeout = \"1s\"\n";
    assert!(r.config.contains(short_poll), "{}", r.config);
    r.config = r.config.replace(short_poll, "");
    let grace = format!("shutdown_grace = \"{}s\"", SHUTDOWN_GRACE.as_secs());
    assert!(r.config.contains(&grace), "{}", r.config);
    if let Some(after) = step_down_after {
        let ttl = format!("lease_ttl = \"{}s\"", LEASE_TTL.as_secs());
        let with = format!("{ttl}\nstep_down_after = \"{}s\"", after.as_secs());
        r.config = r.config.replace(&ttl, &with);
    }
    if let Some(f) = forwarder {
        r.config = r.config.replace(rig.sim.base_url().trim_end_matches('/'), &f.url());
    }
    r
}

/// Which replicas reach the control plane through a forwarder.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Behind {
    A,
    B,
    Both,
}

/// etcd, the recording MCP server, the simulator and two replicas: `a` the active, `b`
/// the standby, each behind its own forwarder when [`Behind`] says so.
struct Pair {
    server: Recorder,
    rig: Rig,
    fa: Option<Forwarder>,
    fb: Option<Forwarder>,
    a: Replica,
    b: Replica,
    ga: Gateway,
    gb: Gateway,
    a_id: String,
    _etcd: EtcdPeer,
}

impl Pair {
    /// Started, with a serving and ready and b's check done once.
    async fn start(step_down_after: Option<Duration>, behind: Behind) -> Pair {
        let etcd = EtcdPeer::start().await;
        let server = Recorder::start().await;
        let rig = Rig::start("").await;
        let fa = match behind {
            Behind::A | Behind::Both => Some(Forwarder::start(sim_addr(&rig)).await),
            Behind::B => None,
        };
        let fb = match behind {
            Behind::B | Behind::Both => Some(Forwarder::start(sim_addr(&rig)).await),
            Behind::A => None,
        };
        let a = replica(&rig, &etcd, &server, fa.as_ref(), step_down_after);
        let b = replica(&rig, &etcd, &server, fb.as_ref(), step_down_after);
        let ga = a.spawn().await;
        a.wait_role("active").await;
        let gb = b.spawn().await;
        b.wait_role("standby").await;
        let warm = call(&rig, "work", "warm", 0);
        rig.wait("a serves", |r| r.responses_for(&warm).count() == 1).await;
        wait_until("a ready and b's check done", BOUND, || async {
            a.get("/readyz").await.is_some_and(|(c, _)| c == 200)
                && b.status().await["coordination"]["control_plane_reachable"] == true
        })
        .await;
        let a_id = a.instance().await;
        Pair {
            server,
            rig,
            fa,
            fb,
            a,
            b,
            ga,
            gb,
            a_id,
            _etcd: etcd,
        }
    }

    fn fa(&self) -> &Forwarder {
        self.fa.as_ref().expect("a is behind a forwarder")
    }

    fn fb(&self) -> &Forwarder {
        self.fb.as_ref().expect("b is behind a forwarder")
    }

    /// Heals every link and stops both replicas (exit 0).
    async fn stop(mut self) {
        for f in [&self.fa, &self.fb].into_iter().flatten() {
            f.heal();
        }
        for gw in [&mut self.ga, &mut self.gb] {
            gw.sigterm();
            assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Looking and measuring
// ---------------------------------------------------------------------------------------

/// How long after `from` `condition` first held, looking every [`LOOK`]; `None` when it
/// did not hold `give_up` after `from`.
async fn measure<F, Fut>(from: Instant, give_up: Duration, mut condition: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        if condition().await {
            return Some(from.elapsed());
        }
        if from.elapsed() >= give_up {
            return None;
        }
        tokio::time::sleep(LOOK).await;
    }
}

/// Looks every [`LOOK`] until `until` that `check` holds; panics with its word when not.
async fn holds_until<F, Fut>(until: Instant, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    loop {
        if let Err(why) = check().await {
            panic!("{why}");
        }
        if Instant::now() >= until {
            return;
        }
        tokio::time::sleep(LOOK).await;
    }
}

async fn readyz_code(replica: &Replica) -> u16 {
    replica.get("/readyz").await.map_or(0, |(code, _)| code)
}

/// `/status`'s `coordination` object.
async fn coordination(replica: &Replica) -> serde_json::Value {
    replica.status().await["coordination"].clone()
}

/// The value of the unlabelled series `name` in `replica`'s `/metrics`.
async fn metric(replica: &Replica, name: &str) -> Option<f64> {
    let (_, text) = replica.get("/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Waits until the simulator has seen every poll of `instance` end (answered, or
/// abandoned): a command queued after that can only be handed to a later poll.
async fn sim_saw_the_polls_of_end(rig: &Rig, instance: &str) {
    assert!(!instance.is_empty(), "the replica's instance id is known");
    wait_until("every poll of the replica ended at the simulator", BOUND, || async {
        rig.sim
            .record()
            .polls
            .iter()
            .filter(|p| p.header("x-tunnel-client-instance-id") == Some(instance))
            .all(|p| p.status.is_some() || p.abandoned)
    })
    .await;
}

/// Each of `markers` reached the MCP server exactly once, none other more than once, and
/// no two calls overlapped.
fn assert_served_once(server: &Recorder, markers: &[&str]) {
    let calls = server.calls();
    assert_no_overlap(&calls);
    let served: BTreeMap<String, usize> = calls.into_iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.2).or_default() += 1;
        m
    });
    assert!(served.values().all(|n| *n == 1), "a command ran twice: {served:?}");
    for marker in markers {
        assert_eq!(served.get(*marker), Some(&1), "{marker}: {served:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_whose_link_drops_packets_silently_steps_down_and_the_standby_serves_the_queued_commands() {
    let p = Pair::start(None, Behind::A).await;
    let interval = check_interval(DEFAULT_STEP_DOWN_AFTER);
    p.fa().blackhole();
    let cut_at = Instant::now();
    // Queued after the cut's first second, once no poll of a is open at the simulator (the
    // one open at the cut was answered, its answer held): a command handed to a poll open
    // at the cut is lost in the partition, which is the cut's doing.
    tokio::time::sleep_until(cut_at + Duration::from_secs(1)).await;
    sim_saw_the_polls_of_end(&p.rig, &p.a_id).await;
    let ids: Vec<String> = (0..3).map(|i| call(&p.rig, "work", &format!("cut{i}"), 0)).collect();

    let bound = DEFAULT_STEP_DOWN_AFTER + interval + SLACK;
    let not_ready = measure(cut_at, bound + SLACK, || async { readyz_code(&p.a).await == 503 }).await;
    let not_ready = not_ready.unwrap_or_else(|| panic!("a still ready {:?} into the cut", bound + SLACK));
    let reason = p.a.get("/readyz").await.unwrap().1;
    eprintln!("cut -> a not ready: {not_ready:?} ({})", reason.trim());
    assert!(
        not_ready <= bound,
        "a ready for {not_ready:?} after the cut (bound {bound:?})"
    );
    let stepped_down = measure(cut_at, CUT, || async { p.a.role().await == "standby" }).await;
    let stepped_down = stepped_down.expect("a stepped down within the cut");
    let step_down_seen = Instant::now();
    eprintln!("cut -> a stepped down: {stepped_down:?}");
    for id in &ids {
        p.rig
            .wait("the queued commands answered", |r| r.responses_for(id).count() >= 1)
            .await;
        assert_eq!(terminal_types(&p.rig, id), ["jsonrpc_response"], "{id}");
    }
    let served = cut_at.elapsed();
    eprintln!("cut -> queued commands served by b: {served:?}");
    assert!(served < CUT, "served {served:?} after the cut, not within it ({CUT:?})");
    p.b.wait_role("active").await;
    assert_eq!(coordination(&p.a).await["step_downs"], 1);
    assert_eq!(
        metric(&p.a, "tunnelgate_coordination_step_downs_total").await,
        Some(1.0)
    );
    assert!(
        p.ga.stderr().contains("giving up the coordination lease"),
        "{}",
        p.ga.stderr()
    );

    tokio::time::sleep_until(cut_at + CUT).await;
    p.fa().heal();
    eprintln!("a at the heal: {}", coordination(&p.a).await);
    after_the_heal(&p, step_down_seen).await;
    eprintln!("a after its hold-off: {}", coordination(&p.a).await);
    let later = call(&p.rig, "work", "later", 0);
    p.rig
        .wait("b still serves", |r| r.responses_for(&later).count() == 1)
        .await;
    assert_eq!(terminal_types(&p.rig, &later), ["jsonrpc_response"]);
    assert_served_once(&p.server, &["warm", "cut0", "cut1", "cut2", "later"]);
    p.stop().await;
}

/// Healed, a stays the standby through its hold-off and past it (b stays the active), and
/// no poll of a stays open at the simulator.
async fn after_the_heal(p: &Pair, step_down_seen: Instant) {
    let until = (step_down_seen + DEFAULT_STEP_DOWN_AFTER + Duration::from_secs(2))
        .max(Instant::now() + Duration::from_secs(3));
    holds_until(until, || async {
        let (ra, rb) = (p.a.role().await, p.b.role().await);
        if ra == "standby" && rb == "active" {
            Ok(())
        } else {
            Err(format!("flapped after the heal: a {ra}, b {rb}"))
        }
    })
    .await;
    assert_eq!(coordination(&p.a).await["step_downs"], 1);
    assert_eq!(coordination(&p.b).await["step_downs"], 0);
    sim_saw_the_polls_of_end(&p.rig, &p.a_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_both_replicas_links_drop_packets_neither_steps_down_and_the_active_is_not_ready() {
    let p = Pair::start(Some(SHORT_STEP_DOWN_AFTER), Behind::Both).await;
    let age = coordination(&p.a).await["last_exchange_age_seconds"].as_f64();
    assert!(
        age.is_some_and(|age| age < 2.0),
        "a's last exchange before the cut: {age:?}"
    );
    p.fa().blackhole();
    p.fb().blackhole();
    let cut_at = Instant::now();

    let bound = SHORT_STEP_DOWN_AFTER + check_interval(SHORT_STEP_DOWN_AFTER) + SLACK;
    let not_ready = measure(cut_at, bound + SLACK, || async { readyz_code(&p.a).await == 503 }).await;
    let not_ready = not_ready.unwrap_or_else(|| panic!("a still ready {:?} into the cut", bound + SLACK));
    eprintln!("cut -> a not ready: {not_ready:?}");
    assert!(
        not_ready <= bound,
        "a ready for {not_ready:?} after the cut (bound {bound:?})"
    );
    let (_, reason) = p.a.get("/readyz").await.unwrap();
    assert!(reason.contains("has not answered a reach check"), "{reason}");
    let age = coordination(&p.a).await["last_exchange_age_seconds"].as_f64();
    assert!(
        age.is_some_and(|age| age >= SHORT_STEP_DOWN_AFTER.as_secs_f64()),
        "a's last exchange once not ready: {age:?}"
    );
    wait_until("both report the control plane unreachable", BOUND, || async {
        coordination(&p.a).await["control_plane_reachable"] == false
            && coordination(&p.b).await["control_plane_reachable"] == false
    })
    .await;

    // Twice step_down_after more: nobody steps down, and nothing changes.
    holds_until(Instant::now() + SHORT_STEP_DOWN_AFTER * 2, || async {
        let (ca, cb) = (coordination(&p.a).await, coordination(&p.b).await);
        let code = readyz_code(&p.a).await;
        let steady = ca["role"] == "active"
            && cb["role"] == "standby"
            && ca["step_downs"] == 0
            && cb["step_downs"] == 0
            && ca["control_plane_reachable"] == false
            && cb["control_plane_reachable"] == false
            && code == 503;
        steady
            .then_some(())
            .ok_or(format!("with every link cut: a {ca}, b {cb}, a's /readyz {code}"))
    })
    .await;
    let stderr = p.ga.stderr();
    assert!(
        stderr.contains("no standby reports it reachable: keeping the lease"),
        "{stderr}"
    );

    // Healed, the tunnel serves again and exactly one replica is ready.
    p.fa().heal();
    p.fb().heal();
    let after = call(&p.rig, "work", "after", 0);
    p.rig
        .wait("the tunnel serves again", |r| r.responses_for(&after).count() == 1)
        .await;
    assert_eq!(terminal_types(&p.rig, &after), ["jsonrpc_response"]);
    wait_until("exactly one replica ready again", BOUND, || async {
        let codes = [readyz_code(&p.a).await, readyz_code(&p.b).await];
        codes.iter().filter(|c| **c == 200).count() == 1
    })
    .await;
    assert_served_once(&p.server, &["warm", "after"]);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_link_drops_packets_reports_unreachable_within_its_check_timeout_and_the_active_is_unaffected()
{
    let p = Pair::start(Some(SHORT_STEP_DOWN_AFTER), Behind::B).await;
    let interval = check_interval(SHORT_STEP_DOWN_AFTER);
    p.fb().blackhole();
    let cut_at = Instant::now();

    // b's next check begins within an interval (and a tick) of its last, and gets no
    // answer within its timeout, one interval.
    let bound = interval * 2 + tick(SHORT_STEP_DOWN_AFTER) + SLACK / 2;
    let reported = measure(cut_at, bound + SLACK, || async {
        coordination(&p.b).await["control_plane_reachable"] == false
    })
    .await;
    let reported = reported.unwrap_or_else(|| panic!("b reports reachable {:?} into the cut", bound + SLACK));
    eprintln!("cut -> b reports the control plane unreachable: {reported:?}");
    assert!(
        reported <= bound,
        "b reported {reported:?} after the cut (bound {bound:?})"
    );

    // a serves on, ready and reaching the control plane, for twice step_down_after.
    let ids: Vec<String> = (0..3).map(|i| call(&p.rig, "work", &format!("cut{i}"), 0)).collect();
    holds_until(Instant::now() + SHORT_STEP_DOWN_AFTER * 2, || async {
        let (ca, cb) = (coordination(&p.a).await, coordination(&p.b).await);
        let code = readyz_code(&p.a).await;
        let steady = ca["role"] == "active"
            && ca["control_plane_reachable"] == true
            && ca["step_downs"] == 0
            && cb["role"] == "standby"
            && cb["control_plane_reachable"] == false
            && code == 200;
        steady
            .then_some(())
            .ok_or(format!("with b's link cut: a {ca}, b {cb}, a's /readyz {code}"))
    })
    .await;
    for id in &ids {
        p.rig.wait("a's answers", |r| r.responses_for(id).count() >= 1).await;
    }
    let record = p.rig.sim.record();
    for id in &ids {
        let answers: Vec<_> = record.responses_for(id).collect();
        assert_eq!(terminal_types(&p.rig, id), ["jsonrpc_response"], "{id}");
        assert!(
            answers
                .iter()
                .all(|r| r.header("x-tunnel-client-instance-id") == Some(p.a_id.as_str())),
            "{id} answered by another replica than a"
        );
    }
    let age = coordination(&p.a).await["last_exchange_age_seconds"].as_f64();
    assert!(
        age.is_some_and(|age| age < interval.as_secs_f64()),
        "a's last exchange: {age:?}"
    );
    assert_served_once(&p.server, &["warm", "cut0", "cut1", "cut2"]);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_poll_of_a_stepped_down_active_is_abandoned_and_counted() {
    let p = Pair::start(Some(SHORT_STEP_DOWN_AFTER), Behind::A).await;
    let abandoned = || metric(&p.a, "tunnelgate_polls_abandoned_total");
    assert_eq!(abandoned().await, Some(0.0));
    let open_poll_of_a = || {
        p.rig.sim.record().polls.iter().any(|poll| {
            poll.header("x-tunnel-client-instance-id") == Some(p.a_id.as_str())
                && poll.status.is_none()
                && !poll.abandoned
        })
    };
    wait_until("a poll of a open at the simulator", BOUND, || async {
        open_poll_of_a()
    })
    .await;
    p.fa().blackhole();
    let cut_at = Instant::now();
    // Most likely handed to that open poll: its answer is held by the blackhole.
    let pre = call(&p.rig, "work", "pre", 0);

    let interval = check_interval(SHORT_STEP_DOWN_AFTER);
    let bound = SHORT_STEP_DOWN_AFTER + interval + SLACK;
    let stepped_down = measure(cut_at, bound + SLACK, || async { p.a.role().await == "standby" }).await;
    let stepped_down = stepped_down.unwrap_or_else(|| panic!("a still active {:?} into the cut", bound + SLACK));
    let step_down_seen = Instant::now();
    eprintln!("cut -> a stepped down: {stepped_down:?}");
    assert!(
        stepped_down <= bound,
        "a stepped down {stepped_down:?} after the cut (bound {bound:?})"
    );
    let counted = measure(step_down_seen, SHUTDOWN_GRACE + SLACK * 2, || async {
        abandoned().await >= Some(1.0)
    })
    .await;
    let counted = counted.expect("a's open poll counted abandoned");
    eprintln!("a's step-down seen -> its open poll counted abandoned: {counted:?}");
    let within = SHUTDOWN_GRACE + Duration::from_millis(500);
    assert!(
        counted <= within,
        "counted {counted:?} after the step-down (bound {within:?})"
    );
    let stderr = p.ga.stderr();
    assert!(
        stderr.contains("no longer the active replica: polling stops"),
        "{stderr}"
    );
    assert!(
        stderr.contains("an open poll was not answered within the bound after the stop; it is dropped"),
        "{stderr}"
    );

    p.fa().heal();
    p.b.wait_role("active").await;
    let after = call(&p.rig, "work", "after", 0);
    p.rig.wait("b serves", |r| r.responses_for(&after).count() == 1).await;
    sim_saw_the_polls_of_end(&p.rig, &p.a_id).await;
    the_command_handed_in_the_cut_never_ran(&p, &pre).await;
    assert_served_once(&p.server, &["warm", "after"]);
    p.stop().await;
}

/// `pre`, queued just after the cut: handed to a's open poll, it never ran and was
/// answered "safe to retry" or not at all; handed to b's, it ran once.
async fn the_command_handed_in_the_cut_never_ran(p: &Pair, pre: &str) {
    let record = p.rig.sim.record();
    let handed_to_a = record.polls.iter().any(|poll| {
        poll.header("x-tunnel-client-instance-id") == Some(p.a_id.as_str())
            && poll.request_ids.iter().any(|id| id == pre)
    });
    if handed_to_a {
        eprintln!("the command queued in the cut was handed to a's open poll");
        let ran = p.server.calls().iter().filter(|c| c.2 == "pre").count();
        assert_eq!(ran, 0, "a command handed to the abandoned poll ran");
        for answer in record.responses_for(pre) {
            let text = String::from_utf8_lossy(&answer.body);
            assert!(text.contains("safe to retry"), "{text}");
        }
    } else {
        eprintln!("the command queued in the cut waited for b's poll");
        p.rig
            .wait("b's answer to it", |r| r.responses_for(pre).count() >= 1)
            .await;
        assert_eq!(terminal_types(&p.rig, pre), ["jsonrpc_response"]);
        assert_eq!(p.server.calls().iter().filter(|c| c.2 == "pre").count(), 1);
    }
}
