//! One etcd transaction per command (`coord::intents`, docs/replicas.md "One transaction
//! per command"), on a real etcd and real `tunnelgate run` processes, with the replicas,
//! the recording MCP server and the helpers of `strict_ha`: an acknowledged command's
//! delete rides the next command's record transaction, or is written alone after 50 ms
//! of idleness.
//!
//! - under load, etcd is asked for about one transaction per command, not two, every
//!   settle is counted and nothing is left in etcd;
//! - an idle active leaves no intent behind for long;
//! - a SIGKILL while commands flow leaves exactly one intent, of a command that was sent
//!   (in flight, or acknowledged with its delete pending), and the standby latches on it;
//!   nothing runs twice;
//! - etcd lost right after an acknowledgement: once it is back every intent is settled,
//!   and a graceful handover latches nothing;
//! - a graceful stop right after an acknowledgement writes the pending delete before it
//!   gives the lease back: the standby latches nothing.
//!
//! etcd's own count of the transactions it was asked for is
//! `grpc_server_handled_total{grpc_method="Txn"}` (its JSON gateway calls its gRPC
//! server). `etcd_mvcc_txn_total` (etcd 3.4) is not that: it counts the store's internal
//! read and write transactions that touched more than one key, so a record with two
//! compares counts once, a record with a folded delete twice (compares, then put and
//! delete) and a lone settle (one compare, one delete) not at all. It is printed, not
//! asserted on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tunnelgate_test_peers::EtcdPeer;

use crate::harness::{http_client, wait_until, Gateway, Rig, TUNNEL};
use crate::strict_ha::{assert_no_overlap, call, terminal_types, Recorder, Replica, BOUND};

/// Commands sent back to back in the load and crash tests.
const N: usize = 40;
/// The gateway's count of settled intents (a folded delete counts as one).
const SETTLED: &str = "tunnelgate_coordination_intent_ops_total{op=\"settle\",result=\"ok\"}";
/// The shortest idle window the background transactions are measured over.
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// How soon an idle active's last intent is gone: `IDLE_SETTLE` (50 ms) and a round trip,
/// with room for a loaded machine.
const IDLE_BOUND: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------
// Replicas, etcd and the numbers read from them
// ---------------------------------------------------------------------------------------

/// etcd, the recording MCP server, the simulator and two replicas: `a` the active, `b`
/// the standby (holding on a latch instead of exiting when `b_holds`).
struct Pair {
    etcd: EtcdPeer,
    server: Recorder,
    rig: Rig,
    a: Replica,
    b: Replica,
    ga: Gateway,
    gb: Gateway,
}

impl Pair {
    /// Started, with one command served by a and its intent settled.
    async fn start(b_holds: bool) -> Pair {
        let etcd = EtcdPeer::start().await;
        let server = Recorder::start().await;
        let rig = Rig::start("").await;
        let a = Replica::new(&rig, &etcd, &server.url(), "");
        let mut b = Replica::new(&rig, &etcd, &server.url(), "");
        if b_holds {
            assert!(b.config.contains("[strict]\n"), "{}", b.config);
            b.config = b.config.replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
        }
        let ga = a.spawn().await;
        a.wait_role("active").await;
        let gb = b.spawn().await;
        b.wait_role("standby").await;
        let p = Pair {
            etcd,
            server,
            rig,
            a,
            b,
            ga,
            gb,
        };
        let warm = call(&p.rig, "work", "warm", 0);
        answered(&p.rig, &warm).await;
        wait_until("the warm-up's intent settled", BOUND, || async {
            settled(&p.a).await == 1.0
        })
        .await;
        no_intent_within(&p.etcd, BOUND).await;
        p
    }
}

/// Waits for `id`'s terminal answer from the MCP server.
async fn answered(rig: &Rig, id: &str) {
    rig.wait("a command's answer", |r| {
        r.responses_for(id)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
}

/// The [`SETTLED`] count in `replica`'s `/metrics`; 0 before the series exists.
async fn settled(replica: &Replica) -> f64 {
    let (_, text) = replica.get("/metrics").await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(SETTLED)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The request ids of the intents in etcd now.
async fn intents(etcd: &EtcdPeer) -> Vec<String> {
    let prefix = format!("/tunnelgate/{TUNNEL}/intents/");
    etcd.keys_under(&prefix)
        .await
        .into_iter()
        .map(|key| key.trim_start_matches(&prefix).to_owned())
        .collect()
}

/// Waits until etcd holds no intent; how long that took.
async fn no_intent_within(etcd: &EtcdPeer, bound: Duration) -> Duration {
    let from = Instant::now();
    wait_until("no intent left in etcd", bound, || async {
        intents(etcd).await.is_empty()
    })
    .await;
    from.elapsed()
}

/// `/status` `coordination.unsettled`.
async fn unsettled(replica: &Replica) -> Option<u64> {
    replica.status().await["coordination"]["unsettled"].as_u64()
}

/// etcd's own counters, from its `/metrics`.
#[derive(Clone, Copy, Debug)]
struct Counters {
    /// Transactions etcd was asked for: `grpc_server_handled_total{grpc_method="Txn"}`,
    /// every code.
    txn_requests: f64,
    /// Raft proposals committed (every write request is one).
    proposals: f64,
    /// `etcd_mvcc_txn_total` (`etcd_debugging_mvcc_txn_total` where that is absent).
    mvcc_txns: f64,
}

impl Counters {
    async fn read(etcd: &EtcdPeer) -> Counters {
        let text = http_client()
            .get(format!("{}/metrics", etcd.url()))
            .send()
            .await
            .expect("etcd serves /metrics")
            .text()
            .await
            .unwrap();
        let value = |line: &str| line.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok());
        let single = |name: &str| {
            text.lines()
                .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
                .and_then(value)
        };
        let txn_requests = text
            .lines()
            .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains("grpc_method=\"Txn\""))
            .filter_map(value)
            .sum();
        let mvcc_txns = single("etcd_mvcc_txn_total").or_else(|| single("etcd_debugging_mvcc_txn_total"));
        Counters {
            txn_requests,
            proposals: single("etcd_server_proposals_committed_total").expect("etcd counts proposals"),
            mvcc_txns: mvcc_txns.expect("etcd counts its mvcc transactions"),
        }
    }

    /// `self - earlier`, each scaled by `scale`.
    fn since(self, earlier: Counters, scale: f64) -> Counters {
        Counters {
            txn_requests: (self.txn_requests - earlier.txn_requests) * scale,
            proposals: (self.proposals - earlier.proposals) * scale,
            mvcc_txns: (self.mvcc_txns - earlier.mvcc_txns) * scale,
        }
    }
}

/// Each marker reached the MCP server at most once, and no two calls overlapped.
fn assert_ran_at_most_once(server: &Recorder) {
    let calls = server.calls();
    assert_no_overlap(&calls);
    let served: BTreeMap<String, usize> = calls.into_iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.2).or_default() += 1;
        m
    });
    assert!(served.values().all(|n| *n == 1), "a command ran twice: {served:?}");
}

/// SIGTERM, exit `code`.
async fn stop(gw: &mut Gateway, code: i32) {
    gw.sigterm();
    assert_eq!(gw.wait_exit(BOUND).await, Some(code), "{}", gw.stderr());
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_sent_back_to_back_cost_etcd_about_one_transaction_each_and_leave_no_intent() {
    let mut p = Pair::start(false).await;
    let settled_before = settled(&p.a).await;
    let before = Counters::read(&p.etcd).await;
    let started = Instant::now();
    // All queued at once: each is handed to the active as soon as the one before ends.
    let ids: Vec<String> = (0..N).map(|i| call(&p.rig, "work", &format!("load{i}"), 0)).collect();
    for id in &ids {
        answered(&p.rig, id).await;
    }
    let want = settled_before + N as f64;
    wait_until("every command's intent settled", BOUND, || async {
        settled(&p.a).await >= want
    })
    .await;
    no_intent_within(&p.etcd, BOUND).await;
    let busy = started.elapsed();
    let burst = Counters::read(&p.etcd).await.since(before, 1.0);

    // The background (the standby's campaigns, the active's own requests) over an idle
    // window at least as long, scaled to the burst's length: a measurement, not a wait
    // for anything.
    let window = busy.max(IDLE_WINDOW);
    let idle_from = Counters::read(&p.etcd).await;
    tokio::time::sleep(window).await;
    let scale = busy.as_secs_f64() / window.as_secs_f64();
    let background = Counters::read(&p.etcd).await.since(idle_from, scale);
    let commands = burst.since(background, 1.0);
    let n = N as f64;
    eprintln!(
        "{N} commands in {busy:?}: etcd delta {burst:?}, background {background:?} (idle {window:?}); \
         per command: {:.2} txn requests, {:.2} proposals, {:.2} mvcc txns",
        commands.txn_requests / n,
        commands.proposals / n,
        commands.mvcc_txns / n
    );
    assert_eq!(settled(&p.a).await, want, "one settle counted per command");
    assert!(
        commands.txn_requests >= n - 1.0,
        "fewer etcd transactions than commands: {commands:?}"
    );
    assert!(
        commands.txn_requests < 1.5 * n,
        "{N} commands asked etcd for {:.1} transactions (one each expected, not two)",
        commands.txn_requests
    );
    assert!(
        commands.proposals < 1.5 * n,
        "{N} commands made etcd commit {:.1} writes",
        commands.proposals
    );
    assert_eq!(unsettled(&p.a).await, Some(0));
    for id in &ids {
        assert_eq!(terminal_types(&p.rig, id), ["jsonrpc_response"], "{id}");
    }
    assert_ran_at_most_once(&p.server);
    stop(&mut p.ga, 0).await;
    stop(&mut p.gb, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_active_leaves_no_intent_in_etcd_a_moment_after_its_last_command() {
    let mut p = Pair::start(false).await;
    let settled_before = settled(&p.a).await;
    let only = call(&p.rig, "work", "only", 0);
    answered(&p.rig, &only).await;
    let gone = no_intent_within(&p.etcd, BOUND).await;
    eprintln!("the last command answered -> no intent in etcd: {gone:?}");
    assert!(
        gone <= IDLE_BOUND,
        "the idle active's last intent stayed {gone:?} (bound {IDLE_BOUND:?})"
    );
    wait_until("the settle counted", BOUND, || async {
        settled(&p.a).await == settled_before + 1.0
    })
    .await;
    assert_eq!(unsettled(&p.a).await, Some(0));
    // A graceful handover after it latches nothing.
    stop(&mut p.ga, 0).await;
    p.b.wait_role("active").await;
    let after = call(&p.rig, "work", "after", 0);
    answered(&p.rig, &after).await;
    assert!(!p.gb.stderr().contains("interrupted_before_ack"), "{}", p.gb.stderr());
    assert_ran_at_most_once(&p.server);
    stop(&mut p.gb, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_killed_while_commands_flow_leaves_one_intent_of_a_sent_command_and_the_standby_latches_on_it() {
    let mut p = Pair::start(true).await;
    let ids: Vec<String> = (0..N).map(|i| call(&p.rig, "work", &format!("c{i}"), 0)).collect();
    // Killed as the tenth answer reaches the control plane: that command's delete is
    // pending, or rides the next record already.
    let tenth = &ids[9];
    p.rig
        .wait("the tenth answer", |r| r.responses_for(tenth).count() >= 1)
        .await;
    p.ga.signal("KILL");
    assert_eq!(p.ga.wait_exit(BOUND).await, Some(128 + 9));
    // Read before the standby can take over (the lease outlives the kill by over 1.3 s),
    // twice alike: a transaction sent just before the kill has landed.
    let mut left = intents(&p.etcd).await;
    while intents(&p.etcd).await != left {
        left = intents(&p.etcd).await;
    }
    let served_at_kill = p.server.count();
    assert_eq!(left.len(), 1, "one intent at a time while commands flow: {left:?}");
    let last_started = p.server.calls().last().map(|c| c.2.clone()).unwrap();

    wait_until("b holding on the latch", BOUND, || async {
        p.b.status().await["fatal"]["category"] == "latched_previously"
    })
    .await;
    let status = p.b.status().await;
    let latched = status["fatal"]["request_id"].as_str().unwrap_or("").to_owned();
    let stderr = p.gb.stderr();
    eprintln!("killed after {served_at_kill} calls (last {last_started}); b latched on {latched}");
    assert_eq!(latched, left[0], "b latched on the intent left in etcd: {status}");
    assert!(
        stderr.contains("category=interrupted_before_ack") && stderr.contains(&latched),
        "{stderr}"
    );
    // The command in flight or acknowledged last (its marker the last the server saw), or
    // the next one, recorded and not yet dispatched.
    let index = ids
        .iter()
        .position(|id| *id == latched)
        .unwrap_or_else(|| panic!("the latched {latched} is none of the commands sent: {ids:?}"));
    let last: usize = last_started.trim_start_matches('c').parse().unwrap();
    assert!(
        index == last || index == last + 1,
        "latched on command {index}, the server last saw command {last}"
    );
    assert!(index >= 9, "command {index} was answered before the kill and settled");
    assert_eq!(p.server.count(), served_at_kill, "nothing ran after the takeover");
    assert_ran_at_most_once(&p.server);
    assert!(intents(&p.etcd).await.is_empty(), "the latch took the intent over");
    stop(&mut p.gb, 89).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lost_right_after_an_acknowledgement_leaves_nothing_once_back_and_the_handover_latches_nothing() {
    let mut p = Pair::start(false).await;
    let first = call(&p.rig, "work", "first", 0);
    p.rig
        .wait("the first answer", |r| r.responses_for(&first).count() >= 1)
        .await;
    p.etcd.kill();
    // Handed to the active's open poll: its record, carrying the first one's delete, fails.
    let second = call(&p.rig, "work", "second", 0);
    let most = AtomicU64::new(0);
    let sample = |n: Option<u64>| most.fetch_max(n.unwrap_or(0), Ordering::SeqCst);
    wait_until(
        "the second command answered, or the active not admitting",
        BOUND,
        || async {
            sample(unsettled(&p.a).await);
            p.rig.sim.record().responses_for(&second).count() >= 1 || p.a.role().await != "active"
        },
    )
    .await;
    sample(unsettled(&p.a).await);
    p.etcd.restart().await;

    wait_until("every unsettled intent settled", BOUND, || async {
        let n = unsettled(&p.a).await;
        sample(n);
        n == Some(0)
    })
    .await;
    no_intent_within(&p.etcd, BOUND).await;
    let ran = p.server.calls().iter().filter(|c| c.2 == "second").count();
    let record = p.rig.sim.record();
    let answer = record
        .responses_for(&second)
        .next()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned());
    eprintln!(
        "most unsettled seen on a while etcd was away: {}; the second command ran {ran} time(s), answered {answer:?}",
        most.load(Ordering::SeqCst)
    );
    p.a.wait_role("active").await;
    let third = call(&p.rig, "work", "third", 0);
    answered(&p.rig, &third).await;
    no_intent_within(&p.etcd, BOUND).await;

    // A graceful handover: the standby latches nothing.
    stop(&mut p.ga, 0).await;
    p.b.wait_role("active").await;
    let after = call(&p.rig, "work", "after", 0);
    answered(&p.rig, &after).await;
    assert!(!p.gb.has_exited(), "the standby exited: {}", p.gb.stderr());
    assert!(!p.gb.stderr().contains("interrupted_before_ack"), "{}", p.gb.stderr());
    assert_ran_at_most_once(&p.server);
    stop(&mut p.gb, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_right_after_an_acknowledgement_writes_the_pending_delete_and_the_standby_latches_nothing() {
    let mut p = Pair::start(false).await;
    let last = call(&p.rig, "work", "last", 0);
    p.rig
        .wait("the last answer", |r| r.responses_for(&last).count() >= 1)
        .await;
    p.ga.sigterm();
    assert_eq!(p.ga.wait_exit(BOUND).await, Some(0), "{}", p.ga.stderr());
    let stderr = p.ga.stderr();
    assert!(!stderr.contains("could not be settled"), "{stderr}");
    assert!(
        intents(&p.etcd).await.is_empty(),
        "the stop gave the lease back with an intent in etcd"
    );
    assert_eq!(terminal_types(&p.rig, &last), ["jsonrpc_response"]);

    p.b.wait_role("active").await;
    let after = call(&p.rig, "work", "after", 0);
    answered(&p.rig, &after).await;
    assert!(!p.gb.has_exited(), "the standby exited: {}", p.gb.stderr());
    let stderr = p.gb.stderr();
    assert!(!stderr.contains("interrupted_before_ack"), "{stderr}");
    assert!(p.b.status().await["coordination"]["latch"].is_null());
    no_intent_within(&p.etcd, BOUND).await;
    assert_ran_at_most_once(&p.server);
    stop(&mut p.gb, 0).await;
}
