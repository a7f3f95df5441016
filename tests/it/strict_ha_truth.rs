//! Strict HA under partial failure, on a real etcd and real `tunnelgate run` processes
//! (the replicas, the recording MCP server and the helpers of `strict_ha`):
//!
//! - etcd killed and restarted while settles fail: every acknowledged command's intent
//!   is settled afterwards, and a graceful handover latches nothing;
//! - the active cut from the control plane only (a loopback forwarder that stops
//!   forwarding): it steps down to the standby, which serves the queued commands within
//!   `step_down_after + lease_ttl` plus a poll; it does not flap back; when every replica
//!   is cut, none steps down and the active reports itself not ready;
//! - a replica frozen past its lease sends no poll when it wakes;
//! - a stop does not drop its open poll: a command handed to it after the stop began is
//!   answered.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tunnelgate_test_peers::EtcdPeer;

use crate::harness::{wait_until, Rig, RigOptions, TUNNEL};
use crate::strict_ha::{assert_no_overlap, call, terminal_types, Recorder, Replica, BOUND, LEASE_TTL};

/// `coordination.step_down_after` in these tests.
const STEP_DOWN_AFTER: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// A loopback forwarder that can stop forwarding
// ---------------------------------------------------------------------------------------

/// A TCP forwarder to `target`. Cut, it closes every connection it carries and closes
/// each new one as soon as it is accepted, as a proxy whose upstream is gone does.
struct Forwarder {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    carried: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _accept: JoinHandle<()>,
}

impl Forwarder {
    async fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let carried: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (cut, carried) = (cut.clone(), carried.clone());
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    carried.lock().unwrap().push(task);
                }
            })
        };
        Forwarder {
            addr,
            cut,
            carried,
            _accept: accept,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for task in self.carried.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// The simulator's address, from its base URL.
fn sim_addr(rig: &Rig) -> SocketAddr {
    rig.sim
        .base_url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// A replica with `coordination.step_down_after`, reaching the control plane through
/// `forwarder` when given.
fn replica(rig: &Rig, etcd: &EtcdPeer, server: &Recorder, forwarder: Option<&Forwarder>) -> Replica {
    let mut r = Replica::new(rig, etcd, &server.url(), "");
    let ttl = format!("lease_ttl = \"{}s\"", LEASE_TTL.as_secs());
    r.config = r.config.replace(
        &ttl,
        &format!("{ttl}\nstep_down_after = \"{}s\"", STEP_DOWN_AFTER.as_secs()),
    );
    if let Some(f) = forwarder {
        r.config = r.config.replace(rig.sim.base_url().trim_end_matches('/'), &f.url());
    }
    r
}

/// The value of the unlabelled series `name` in `replica`'s `/metrics`.
async fn metric(replica: &Replica, name: &str) -> Option<f64> {
    let (_, text) = replica.get("/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_and_restarted_while_settles_fail_leaves_no_intent_and_the_handover_latches_nothing() {
    let mut etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let (a, b) = (replica(&rig, &etcd, &server, None), replica(&rig, &etcd, &server, None));
    let mut ga = a.spawn().await;
    a.wait_role("active").await;
    let mut gb = b.spawn().await;
    b.wait_role("standby").await;
    assert_eq!(metric(&a, "tunnelgate_coordination_unsettled_intents").await, Some(0.0));

    // A call in flight when etcd dies, and more queued behind it: its settle fails, and
    // so do the records and settles of those admitted before the renew deadline.
    let held = call(&rig, "hold", "held", 0);
    wait_until("the held call at the server", BOUND, || async { server.count() == 1 }).await;
    etcd.kill();
    let queued: Vec<String> = (0..4).map(|i| call(&rig, "work", &format!("q{i}"), 0)).collect();
    server.release();
    rig.wait("the held call's acknowledged answer", |r| {
        r.responses_for(&held)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    wait_until("a settle etcd did not confirm", BOUND, || async {
        a.status().await["coordination"]["unsettled"].as_u64() >= Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    etcd.restart().await;

    // Every command is answered, and every settle lands once etcd answers again.
    let more: Vec<String> = (0..4).map(|i| call(&rig, "work", &format!("m{i}"), 0)).collect();
    for id in queued.iter().chain(&more) {
        rig.wait("an answer for every command", |r| r.responses_for(id).count() > 0)
            .await;
    }
    wait_until("every unsettled intent settled", BOUND, || async {
        a.status().await["coordination"]["unsettled"].as_u64() == Some(0)
    })
    .await;
    assert_eq!(metric(&a, "tunnelgate_coordination_unsettled_intents").await, Some(0.0));
    // The last acknowledged command's delete rides the next record or, with none, is
    // written alone after a short idle wait: nothing stays.
    let prefix = format!("/tunnelgate/{TUNNEL}/intents/");
    wait_until("no intent left in etcd", BOUND, || async {
        etcd.keys_under(&prefix).await.is_empty()
    })
    .await;

    // A graceful handover, as a rolling update does: the standby takes over and latches
    // nothing.
    ga.sigterm();
    assert_eq!(ga.wait_exit(BOUND).await, Some(0), "{}", ga.stderr());
    b.wait_role("active").await;
    let after = call(&rig, "work", "after", 0);
    rig.wait("the call after the handover", |r| r.responses_for(&after).count() >= 1)
        .await;
    assert!(!gb.has_exited(), "the standby exited: {}", gb.stderr());
    assert!(!gb.stderr().contains("interrupted_before_ack"), "{}", gb.stderr());
    assert_eq!(terminal_types(&rig, &after), ["jsonrpc_response"]);
    assert_no_overlap(&server.calls());
    gb.sigterm();
    assert_eq!(gb.wait_exit(BOUND).await, Some(0), "{}", gb.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_cut_from_the_control_plane_steps_down_and_the_standby_serves_the_queued_commands() {
    let etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let forwarder = Forwarder::start(sim_addr(&rig)).await;
    let a = replica(&rig, &etcd, &server, Some(&forwarder));
    let b = replica(&rig, &etcd, &server, None);
    let mut ga = a.spawn().await;
    a.wait_role("active").await;
    let mut gb = b.spawn().await;
    b.wait_role("standby").await;
    let warm = call(&rig, "work", "warm", 0);
    rig.wait("a serves", |r| r.responses_for(&warm).count() == 1).await;
    assert_eq!(metric(&a, "tunnelgate_coordination_step_downs_total").await, Some(0.0));

    forwarder.cut();
    let cut_at = Instant::now();
    // Queued once a has seen the cut: a command handed to its open poll in the instant
    // the forwarder drops it would be lost on the wire (or, dispatched with its answer
    // lost, latch), which is the cut's doing, not the step-down's.
    wait_until("a poll of a failed", BOUND, || async {
        a.status().await["control_plane"]["consecutive_poll_errors"].as_u64() > Some(0)
    })
    .await;
    let ids: Vec<String> = (0..3).map(|i| call(&rig, "work", &format!("cut{i}"), 0)).collect();
    for id in &ids {
        rig.wait("the queued commands answered", |r| r.responses_for(id).count() >= 1)
            .await;
    }
    let served_after = cut_at.elapsed();
    // step_down_after + lease_ttl plus one poll (1 s), and a second for a loaded machine.
    let bound = STEP_DOWN_AFTER + LEASE_TTL + Duration::from_secs(2);
    assert!(
        served_after <= bound,
        "served again {served_after:?} after the cut (bound {bound:?})"
    );
    eprintln!("the standby served the queued commands {served_after:?} after the cut");
    for id in &ids {
        assert_eq!(terminal_types(&rig, id), ["jsonrpc_response"], "{id}");
    }
    a.wait_role("standby").await;
    b.wait_role("active").await;
    let status = a.status().await;
    assert_eq!(status["coordination"]["step_downs"], 1, "{status}");
    assert_eq!(metric(&a, "tunnelgate_coordination_step_downs_total").await, Some(1.0));
    assert!(
        ga.stderr().contains("giving up the coordination lease"),
        "{}",
        ga.stderr()
    );

    // Healed, the replica that stepped down stays the standby: no flapping back.
    forwarder.heal();
    tokio::time::sleep(STEP_DOWN_AFTER * 2).await;
    assert_eq!(a.role().await, "standby");
    assert_eq!(b.role().await, "active");
    let later = call(&rig, "work", "later", 0);
    rig.wait("b still serves", |r| r.responses_for(&later).count() == 1)
        .await;
    assert_no_overlap(&server.calls());
    for gw in [&mut ga, &mut gb] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_replica_is_cut_from_the_control_plane_none_steps_down_and_the_active_is_not_ready() {
    let etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let (fa, fb) = (
        Forwarder::start(sim_addr(&rig)).await,
        Forwarder::start(sim_addr(&rig)).await,
    );
    let a = replica(&rig, &etcd, &server, Some(&fa));
    let b = replica(&rig, &etcd, &server, Some(&fb));
    let mut ga = a.spawn().await;
    a.wait_role("active").await;
    let mut gb = b.spawn().await;
    b.wait_role("standby").await;
    wait_until("a ready", BOUND, || async {
        a.get("/readyz").await.is_some_and(|(c, _)| c == 200)
    })
    .await;

    fa.cut();
    fb.cut();
    let cut_at = Instant::now();
    wait_until("a not ready", BOUND, || async {
        a.get("/readyz").await.is_some_and(|(c, _)| c == 503)
    })
    .await;
    let not_ready_after = cut_at.elapsed();
    assert!(
        not_ready_after <= STEP_DOWN_AFTER + Duration::from_secs(1),
        "ready for {not_ready_after:?} with every poll failing"
    );
    let (_, reason) = a.get("/readyz").await.unwrap();
    assert!(reason.contains("every poll has failed"), "{reason}");
    tokio::time::sleep(STEP_DOWN_AFTER * 2).await;
    assert_eq!(
        a.role().await,
        "active",
        "the active stepped down with no standby to serve"
    );
    assert_eq!(b.role().await, "standby");
    assert_eq!(a.status().await["coordination"]["step_downs"], 0);
    assert_eq!(b.status().await["coordination"]["control_plane_reachable"], false);

    // Healed, the tunnel serves again: from a, or from b if b's check saw the control
    // plane again before a's backed-off poll did (then a steps down to it).
    fa.heal();
    fb.heal();
    let after = call(&rig, "work", "after", 0);
    rig.wait("the tunnel serves again", |r| r.responses_for(&after).count() == 1)
        .await;
    assert_eq!(terminal_types(&rig, &after), ["jsonrpc_response"]);
    let ready = || async {
        let (ra, rb) = (a.get("/readyz").await, b.get("/readyz").await);
        [ra, rb]
            .iter()
            .filter(|r| r.as_ref().is_some_and(|(c, _)| *c == 200))
            .count()
            == 1
    };
    wait_until("exactly one replica ready again", BOUND, ready).await;
    for gw in [&mut ga, &mut gb] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_frozen_past_its_lease_sends_no_poll_when_it_wakes() {
    let etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let (a, b) = (replica(&rig, &etcd, &server, None), replica(&rig, &etcd, &server, None));
    let mut ga = a.spawn().await;
    a.wait_role("active").await;
    let a_id = a.instance().await;
    let mut gb = b.spawn().await;
    b.wait_role("standby").await;
    let polls_of_a = || {
        rig.sim
            .record()
            .polls
            .iter()
            .filter(|p| p.header("x-tunnel-client-instance-id") == Some(a_id.as_str()))
            .count()
    };
    wait_until("a polls", BOUND, || async { polls_of_a() > 0 }).await;

    ga.signal("STOP");
    b.wait_role("active").await;
    // Past the lease, with b serving: whatever a sent before it froze has arrived.
    tokio::time::sleep(LEASE_TTL).await;
    let before = polls_of_a();
    ga.signal("CONT");
    a.wait_role("standby").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(polls_of_a(), before, "a polled after waking past its lease");
    for gw in [&mut ga, &mut gb] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_handed_to_the_open_poll_after_a_stop_began_is_answered_not_executed() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions {
        strict: false,
        ..RigOptions::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    // A long poll (not the quick first one) open at the control plane.
    let open_long_poll = || {
        rig.sim
            .record()
            .polls
            .last()
            .is_some_and(|p| p.status.is_none() && !p.abandoned && p.timeout_ms == Some(1000))
    };
    wait_until("an open long poll", BOUND, || async { open_long_poll() }).await;
    gw.sigterm();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = rig.enqueue_call("echo", serde_json::json!({"text": "late"}));
    let record = rig
        .wait("an answer for the late command", |r| {
            r.responses_for(&late).count() >= 1
        })
        .await;
    let answer = record.responses_for(&late).next().unwrap();
    let text = String::from_utf8_lossy(&answer.body);
    assert!(text.contains("safe to retry"), "{text}");
    assert_eq!(rig.stub.count("tools/call"), 0, "a stopping gateway ran a command");
    assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    assert!(
        !rig.sim.record().polls.iter().any(|p| p.abandoned),
        "a poll was dropped"
    );
}
