//! Strict mode across replicas on a real etcd (`coordination.backend = "etcd"`): one
//! election, write-ahead intents in etcd, the cluster-wide latch. Each test starts its
//! own etcd (`tunnelgate_test_peers::EtcdPeer`), the in-process simulator, and two or three real
//! `tunnelgate run` processes on one tunnel, with `lease_ttl = "2s"` (renewal every
//! 667 ms, renew deadline 1.33 s after a renewal was sent).
//!
//! The MCP server is [`Recorder`]: it records when each request it serves starts and
//! ends, so that "no two dispatch intervals overlap" is read from the server's own
//! clock, and it can hold a call until told.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::Instant;
use tunnelgate_test_peers::EtcdPeer;

use crate::harness::{free_port, http_client, wait_until, Gateway, Rig, RigOptions};

pub(crate) const BOUND: Duration = Duration::from_secs(30);
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// The recording MCP server
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Served {
    /// (start, end, request marker) of every `tools/call`, in arrival order; `end` is
    /// `None` while the call is held.
    calls: Vec<(Instant, Option<Instant>, String)>,
}

#[derive(Clone, Default)]
struct RecorderState {
    served: Arc<Mutex<Served>>,
    release: Arc<Notify>,
}

/// An HTTP MCP server that records every call's interval. Tools: `work` (sleeps
/// `arguments.ms`), `hold` (answers only after [`Recorder::release`]).
pub(crate) struct Recorder {
    addr: SocketAddr,
    state: RecorderState,
    _task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub(crate) async fn start() -> Recorder {
        let state = RecorderState::default();
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(serve))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Recorder {
            addr,
            state,
            _task: task,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub(crate) fn calls(&self) -> Vec<(Instant, Option<Instant>, String)> {
        self.state.served.lock().unwrap().calls.clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.state.served.lock().unwrap().calls.len()
    }

    pub(crate) fn release(&self) {
        self.state.release.notify_waiters();
    }
}

async fn serve(State(state): State<RecorderState>, body: Bytes) -> Response {
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = msg.get("id").cloned();
    let reply = |result: Value| {
        axum::Json(json!({"jsonrpc": "2.0", "id": id.clone().unwrap_or(Value::Null), "result": result})).into_response()
    };
    match msg.get("method").and_then(Value::as_str) {
        Some("initialize") => reply(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "recorder", "version": "1"}
        })),
        Some("tools/call") => {
            let name = msg.pointer("/params/name").and_then(Value::as_str).unwrap_or("");
            let marker = msg
                .pointer("/params/arguments/marker")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let index = {
                let mut served = state.served.lock().unwrap();
                served.calls.push((Instant::now(), None, marker));
                served.calls.len() - 1
            };
            match name {
                "hold" => state.release.notified().await,
                _ => {
                    let ms = msg.pointer("/params/arguments/ms").and_then(Value::as_u64).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
            state.served.lock().unwrap().calls[index].1 = Some(Instant::now());
            reply(json!({"content": [{"type": "text", "text": "done"}], "isError": false}))
        }
        _ if id.is_none() => axum::http::StatusCode::ACCEPTED.into_response(),
        _ => reply(json!({})),
    }
}

// ---------------------------------------------------------------------------------------
// Replicas
// ---------------------------------------------------------------------------------------

/// One replica's own ops port and latch file, beside the shared rig.
pub(crate) struct Replica {
    pub ops: u16,
    dir: tempfile::TempDir,
    pub config: String,
}

impl Replica {
    pub(crate) fn new(rig: &Rig, etcd: &EtcdPeer, mcp_url: &str, extra: &str) -> Replica {
        let dir = tempfile::tempdir().unwrap();
        let ops = distinct_port(rig.ops_port);
        let coordination = format!(
            "\n[coordination]\nbackend = \"etcd\"\nlease_ttl = \"{}s\"\n[coordination.etcd]\nendpoints = [\"{}\"]\n{extra}",
            LEASE_TTL.as_secs(),
            etcd.url()
        );
        let config = rig
            .config_to(
                mcp_url,
                &RigOptions {
                    extra: &coordination,
                    ..RigOptions::default()
                },
            )
            .replace(&format!("127.0.0.1:{}", rig.ops_port), &format!("127.0.0.1:{ops}"))
            .replace(
                &rig.latch_path().display().to_string(),
                &dir.path().join("latch.json").display().to_string(),
            );
        Replica { ops, dir, config }
    }

    /// Starts the replica and waits for its own "ops listener ready" line (not for
    /// `/livez`: another process may answer on a port taken meanwhile).
    pub(crate) async fn spawn(&self) -> Gateway {
        let mut gw = Gateway::run(&self.config);
        let deadline = Instant::now() + BOUND;
        while !gw.stderr().contains("ops listener ready") {
            assert!(!gw.has_exited(), "the replica exited at start: {}", gw.stderr());
            assert!(Instant::now() < deadline, "the replica did not start: {}", gw.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gw
    }

    fn config_file(&self) -> std::path::PathBuf {
        let path = self.dir.path().join("config.toml");
        std::fs::write(&path, &self.config).unwrap();
        path
    }

    pub(crate) async fn get(&self, path: &str) -> Option<(u16, String)> {
        let resp = http_client()
            .get(format!("http://127.0.0.1:{}{path}", self.ops))
            .send()
            .await
            .ok()?;
        let code = resp.status().as_u16();
        Some((code, resp.text().await.ok()?))
    }

    pub(crate) async fn status(&self) -> Value {
        let (_, body) = self.get("/status").await.unwrap_or_default();
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    pub(crate) async fn role(&self) -> String {
        self.status().await["coordination"]["role"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    pub(crate) async fn wait_role(&self, role: &str) {
        let deadline = Instant::now() + BOUND;
        loop {
            let status = self.status().await;
            if status["coordination"]["role"] == role {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {BOUND:?} waiting for role {role} on :{}; last /status: {status}",
                self.ops
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn instance(&self) -> String {
        self.status().await["coordination"]["holder"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

/// After a replica is killed: waits until the simulator has seen every poll of
/// `instance` end (answered, or marked abandoned once its server saw the connection
/// close). A command queued before then can be handed to the dead replica's open poll
/// and written to a closed socket: lost, as with any control plane, and not what these
/// tests are about (a command queued for the replicas still alive). Seen in a loaded
/// run, where the simulator read the close after the command was queued.
async fn sim_saw_the_polls_of_end(rig: &Rig, instance: &str) {
    assert!(!instance.is_empty(), "the killed replica's instance id is known");
    wait_until(
        "the simulator to see the killed replica's open poll end",
        BOUND,
        || async {
            rig.sim
                .record()
                .polls
                .iter()
                .filter(|p| p.header("x-tunnel-client-instance-id") == Some(instance))
                .all(|p| p.status.is_some() || p.abandoned)
        },
    )
    .await;
}

/// A free port no other replica of this test process was given (two quick binds to
/// port 0 can return the same port), and not `taken`.
fn distinct_port(taken: u16) -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = free_port();
        if port != taken && given.insert(port) {
            return port;
        }
    }
}

/// etcd, the recording MCP server, the simulator, and two replicas on them: `a` the
/// active (started first), `b` the standby.
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
    async fn start() -> Pair {
        let etcd = EtcdPeer::start().await;
        let server = Recorder::start().await;
        let rig = Rig::start("").await;
        let a = Replica::new(&rig, &etcd, &server.url(), "");
        let b = Replica::new(&rig, &etcd, &server.url(), "");
        let ga = a.spawn().await;
        a.wait_role("active").await;
        let gb = b.spawn().await;
        b.wait_role("standby").await;
        Pair {
            etcd,
            server,
            rig,
            a,
            b,
            ga,
            gb,
        }
    }
}

pub(crate) fn call(rig: &Rig, tool: &str, marker: &str, ms: u64) -> String {
    rig.sim.enqueue(tunnelgate_sim::NewCommand::jsonrpc(json!({
        "jsonrpc": "2.0", "id": format!("rpc-{marker}"), "method": "tools/call",
        "params": {"name": tool, "arguments": {"marker": marker, "ms": ms}}
    })))
}

/// The instance ids of the pollers, in the order the simulator saw the polls, with
/// consecutive repeats folded: `[a, b]` means a polled, then only b.
fn poll_runs(rig: &Rig) -> Vec<String> {
    let mut runs: Vec<String> = Vec::new();
    for poll in rig.sim.record().polls {
        let who = poll.header("x-tunnel-client-instance-id").unwrap_or("").to_owned();
        if runs.last() != Some(&who) {
            runs.push(who);
        }
    }
    runs
}

/// The terminal response types posted for `id`.
pub(crate) fn terminal_types(rig: &Rig, id: &str) -> Vec<String> {
    rig.sim
        .record()
        .responses_for(id)
        .filter_map(|r| r.resp_type.clone())
        .filter(|t| t != "notification")
        .collect()
}

/// No two served calls overlap: sorted by start, each starts after the previous ended.
pub(crate) fn assert_no_overlap(calls: &[(Instant, Option<Instant>, String)]) {
    let mut sorted = calls.to_vec();
    sorted.sort_by_key(|c| c.0);
    for pair in sorted.windows(2) {
        let end = pair[0].1.unwrap_or_else(|| panic!("call {} never ended", pair[0].2));
        assert!(
            pair[1].0 >= end,
            "calls {} and {} overlapped at the MCP server",
            pair[0].2,
            pair[1].2
        );
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_strict_replicas_never_dispatch_at_once_and_only_the_active_polls() {
    let Pair {
        etcd: _etcd,
        server,
        rig,
        a,
        b,
        mut ga,
        mut gb,
    } = Pair::start().await;
    let (code, body) = b.get("/readyz").await.unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("standby"), "{body}");
    assert_eq!(b.status().await["state"], "standby");

    // Two hundred calls of 0-3 ms in two halves; between them the active is stopped
    // (SIGTERM) and started again, so the lease changes hands. The stop comes once the
    // first half is answered: a stop drops the open long poll, and a control plane that
    // still answers it hands its commands to nobody (docs/replicas.md, "Several replicas").
    let calls_of = |range: std::ops::Range<u64>| -> Vec<String> {
        range.map(|i| call(&rig, "work", &format!("m{i}"), i % 4)).collect()
    };
    let mut ids = calls_of(0..100);
    rig.wait("the first half's terminal responses", |r| {
        ids.iter().all(|id| {
            r.responses_for(id)
                .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
        })
    })
    .await;
    ga.sigterm();
    assert_eq!(ga.wait_exit(BOUND).await, Some(0), "{}", ga.stderr());
    b.wait_role("active").await;
    let mut ga = a.spawn().await;
    a.wait_role("standby").await;
    ids.extend(calls_of(100..200));
    rig.wait("every command's terminal response", |r| {
        ids.iter().all(|id| {
            r.responses_for(id)
                .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
        })
    })
    .await;

    let calls = server.calls();
    assert_no_overlap(&calls);
    // Each command reached the server at most once, and each has exactly one terminal
    // response.
    let mut seen = BTreeSet::new();
    for (_, _, marker) in &calls {
        assert!(seen.insert(marker.clone()), "{marker} reached the MCP server twice");
    }
    for id in &ids {
        assert_eq!(
            terminal_types(&rig, id).len(),
            1,
            "{id}: {:?}",
            terminal_types(&rig, id)
        );
    }
    // One poller at a time: a's polls, then b's (after the takeover), and nothing of the
    // restarted a, a standby.
    let runs = poll_runs(&rig);
    assert_eq!(runs.len(), 2, "the polls changed hands once: {runs:?}");
    let metrics = b.get("/metrics").await.unwrap().1;
    assert!(
        metrics.contains("tunnelgate_coordination_role{role=\"active\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tunnelgate_coordination_takeovers_total 1"),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    for gw in [&mut ga, &mut gb] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_active_holding_a_call_makes_the_standby_latch_on_its_intent_and_every_replica_holds() {
    let Pair {
        etcd,
        server,
        rig,
        a,
        b,
        mut ga,
        mut gb,
    } = Pair::start().await;

    let held = call(&rig, "hold", "held", 0);
    wait_until("the held call at the server", BOUND, || async { server.count() == 1 }).await;
    let a_id = a.instance().await;
    ga.signal("KILL");
    assert_eq!(ga.wait_exit(BOUND).await, Some(128 + 9));
    sim_saw_the_polls_of_end(&rig, &a_id).await;
    let next = call(&rig, "work", "after-kill", 0);

    // The standby takes over, finds the intent, latches with its request id, exits 90.
    let code = gb.wait_exit(BOUND).await;
    let stderr = gb.stderr();
    assert_eq!(code, Some(90), "{stderr}");
    assert!(stderr.contains("category=interrupted_before_ack"), "{stderr}");
    assert!(stderr.contains(&held), "the latch names the held command: {stderr}");
    assert_eq!(server.count(), 1, "nothing dispatched after the takeover");
    assert!(terminal_types(&rig, &next).is_empty());

    // A replica started now, with no local latch file, holds on the cluster latch.
    let c = Replica::new(&rig, &etcd, &server.url(), "");
    let mut gc = c.spawn().await;
    c.wait_role("latched").await;
    let (code, body) = c.get("/readyz").await.unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("interrupted_before_ack"), "{body}");
    let metrics = c.get("/metrics").await.unwrap().1;
    assert!(
        metrics.contains("tunnelgate_fatal_info{category=\"interrupted_before_ack\"} 1"),
        "{metrics}"
    );
    assert_eq!(c.status().await["coordination"]["latch"]["request_id"], held.as_str());

    // `latch show` names it; `latch clear` (on b's host, where the latch file is) clears
    // both, and the holding replica goes on: the next command is served.
    let config = b.config_file();
    let config = config.to_str().unwrap();
    let show = Gateway::cli(&["latch", "show", "--config", config], None, &[], BOUND).await;
    assert!(show.stdout.contains("cluster-wide latch on etcd"), "{}", show.stdout);
    assert!(show.stdout.contains(&held), "{}", show.stdout);
    let (status, detail) = doctor_coordination(&c.config).await;
    assert_eq!(status, "fail", "{detail}");
    assert!(
        detail.contains("cluster-wide latch is set") && detail.contains(&held),
        "{detail}"
    );
    let clear = Gateway::cli(&["latch", "clear", "--yes", "--config", config], None, &[], BOUND).await;
    assert_eq!(clear.code, 0, "{} {}", clear.stdout, clear.stderr);
    c.wait_role("active").await;
    rig.wait("the next command's answer", |r| {
        r.responses_for(&next)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    let answer: Vec<String> = rig
        .sim
        .record()
        .responses_for(&next)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(server.count(), 2, "the next command reached the server: {answer:?}");
    server.release();
    gc.sigterm();
    assert_eq!(gc.wait_exit(BOUND).await, Some(0), "{}", gc.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_idle_active_is_replaced_within_the_lease_and_one_renewal_with_no_latch() {
    let Pair {
        etcd: _etcd,
        server: _server,
        rig,
        a,
        b,
        mut ga,
        mut gb,
    } = Pair::start().await;
    let first = call(&rig, "work", "before", 0);
    rig.wait("the first answer", |r| r.responses_for(&first).count() == 1)
        .await;
    // Idle means settled too: the settle follows the acknowledgement.
    wait_until("the first intent settled", BOUND, || async {
        a.get("/metrics")
            .await
            .is_some_and(|(_, m)| m.contains("tunnelgate_coordination_intent_ops_total{op=\"settle\",result=\"ok\"} 1"))
    })
    .await;

    let a_id = a.instance().await;
    ga.signal("KILL");
    let killed = Instant::now();
    assert_eq!(ga.wait_exit(BOUND).await, Some(128 + 9));
    while b.role().await != "active" {
        assert!(!gb.has_exited(), "b exited: {}", gb.stderr());
        assert!(killed.elapsed() < BOUND, "b never became the active: {}", gb.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let takeover = killed.elapsed();
    // lease_ttl plus one renewal interval, plus the status reads' own latency.
    let bound = LEASE_TTL + LEASE_TTL / 3 + Duration::from_millis(700);
    assert!(takeover <= bound, "the takeover took {takeover:?} (bound {bound:?})");
    eprintln!("takeover after SIGKILL: {} ms", takeover.as_millis());

    sim_saw_the_polls_of_end(&rig, &a_id).await;
    let next = call(&rig, "work", "after", 0);
    rig.wait("the next answer", |r| {
        r.responses_for(&next)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    assert!(b.status().await["coordination"]["latch"].is_null());
    gb.sigterm();
    assert_eq!(gb.wait_exit(BOUND).await, Some(0), "{}", gb.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_active_that_wakes_after_losing_its_lease_dispatches_nothing() {
    let Pair {
        etcd: _etcd,
        server,
        rig,
        a,
        b,
        mut ga,
        mut gb,
    } = Pair::start().await;
    let a_id = a.instance().await;

    ga.signal("STOP");
    b.wait_role("active").await;
    let b_id = b.instance().await;
    assert_ne!(a_id, b_id);
    let during = call(&rig, "work", "during", 0);
    rig.wait("the call served by b", |r| r.responses_for(&during).count() == 1)
        .await;
    ga.signal("CONT");
    a.wait_role("standby").await;
    let ids: Vec<String> = (0..20).map(|i| call(&rig, "work", &format!("late{i}"), 0)).collect();
    rig.wait("every later answer", |r| {
        ids.iter().all(|id| r.responses_for(id).count() >= 1)
    })
    .await;

    // Whatever a answered after waking was not dispatched; b served the rest.
    let record = rig.sim.record();
    let from_a: Vec<_> = record
        .responses
        .iter()
        .filter(|r| r.header("x-tunnel-client-instance-id") == Some(a_id.as_str()))
        .filter(|r| {
            r.request_id
                .as_ref()
                .is_some_and(|id| ids.contains(id) || *id == during)
        })
        .collect();
    for r in &from_a {
        let text = String::from_utf8_lossy(&r.body);
        assert!(
            text.contains("safe to retry"),
            "a answered after waking, not as undelivered: {text}"
        );
    }
    let served: BTreeMap<String, usize> = server.calls().into_iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.2).or_default() += 1;
        m
    });
    assert!(served.values().all(|n| *n == 1), "{served:?}");
    assert_no_overlap(&server.calls());
    for gw in [&mut ga, &mut gb] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_under_an_active_stops_admission_and_the_call_in_flight_still_ends_acked() {
    let etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let a = Replica::new(&rig, &etcd, &server.url(), "");
    let mut ga = a.spawn().await;
    a.wait_role("active").await;

    let held = call(&rig, "hold", "held", 0);
    wait_until("the held call at the server", BOUND, || async { server.count() == 1 }).await;
    etcd.pause().await;
    let paused = Instant::now();
    wait_until("a not admitting", BOUND, || async { a.role().await != "active" }).await;
    let stopped_admitting = paused.elapsed();
    assert!(
        stopped_admitting <= LEASE_TTL,
        "the active admitted for {stopped_admitting:?} after etcd stopped (renew deadline 2/3 of {LEASE_TTL:?})"
    );
    let (code, _) = a.get("/readyz").await.unwrap();
    assert_eq!(code, 503);
    let queued = call(&rig, "work", "queued", 0);

    // The call in flight finishes and is acknowledged.
    server.release();
    rig.wait("the held call's acknowledged answer", |r| {
        r.responses_for(&held)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    etcd.resume();
    // Then either its intent settles and the queued command is served, or the intent is
    // left and the replica latches on it: never a silent loss.
    let deadline = Instant::now() + BOUND;
    while terminal_types(&rig, &queued).is_empty() && !ga.has_exited() {
        assert!(
            Instant::now() < deadline,
            "neither settled nor latched: {}",
            ga.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if ga.has_exited() {
        let stderr = ga.stderr();
        assert!(
            stderr.contains("category=interrupted_before_ack") && stderr.contains(&held),
            "{stderr}"
        );
    } else {
        // Served once the intent settled, or, when the poll that was open as admission
        // stopped brought it, answered "not executed" (that poll is not dropped).
        let record = rig.sim.record();
        let answer = record.responses_for(&queued).next().unwrap();
        let not_executed = String::from_utf8_lossy(&answer.body).contains("safe to retry");
        assert_eq!(server.count(), if not_executed { 1 } else { 2 });
        ga.sigterm();
        assert_eq!(ga.wait_exit(BOUND).await, Some(0), "{}", ga.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_replica_that_cannot_reach_etcd_at_start_is_not_ready_and_never_polls() {
    let rig = Rig::start("").await;
    // A port that refuses every connect: bound, never listening.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let ops = free_port();
    let config = rig
        .config(&RigOptions {
            extra: &format!(
                "\n[coordination]\nbackend = \"etcd\"\nlease_ttl = \"2s\"\n[coordination.etcd]\nendpoints = [\"http://127.0.0.1:{port}\"]\n"
            ),
            ..RigOptions::default()
        })
        .replace(&format!("127.0.0.1:{}", rig.ops_port), &format!("127.0.0.1:{ops}"))
        .replace(
            &rig.latch_path().display().to_string(),
            &dir.path().join("latch.json").display().to_string(),
        );
    let mut gw = Gateway::run(&config);
    gw.wait_http_ready(&format!("http://127.0.0.1:{ops}/livez"), BOUND)
        .await;
    let readyz = || async {
        let resp = http_client()
            .get(format!("http://127.0.0.1:{ops}/readyz"))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    };
    wait_until("the uncoordinated reason", BOUND, || async {
        readyz().await.1.contains("coordination unavailable")
    })
    .await;
    let id = rig.enqueue_call("echo", json!({"message": "never"}));
    wait_until("the unreachable etcd in the log", BOUND, || async {
        gw.stderr().contains("etcd cannot be reached")
    })
    .await;
    // A negative check needs time to pass: three campaign attempts (one per renewal
    // interval) fail meanwhile, and none may poll.
    tokio::time::sleep(LEASE_TTL).await;
    assert_eq!(readyz().await.0, 503);
    assert!(
        rig.sim.record().polls.is_empty(),
        "an uncoordinated strict replica never polls"
    );
    assert_eq!(rig.stub.count("tools/call"), 0);
    assert!(terminal_types(&rig, &id).is_empty());
    gw.sigterm();
    assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());
}

/// `tunnelgate doctor --json` on `config`: the `coordination` check's status and detail.
async fn doctor_coordination(config: &str) -> (String, String) {
    let run = Gateway::cli(&["doctor", "--json"], Some(config), &[], BOUND).await;
    let report: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "coordination")
        .unwrap_or_else(|| panic!("no coordination check: {report}"))
        .clone();
    assert!(
        !run.stdout.contains("right-pw") && !run.stdout.contains("wrong-pw"),
        "{}",
        run.stdout
    );
    (
        check["status"].as_str().unwrap().to_owned(),
        check["detail"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_holder_and_fails_on_refused_credentials_or_an_unreachable_etcd() {
    let etcd = EtcdPeer::start().await;
    etcd.enable_auth("gateway", "right-pw").await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let auth = |pw: &str| format!("username = \"gateway\"\npassword = \"{pw}\"\n");
    let good = Replica::new(&rig, &etcd, &server.url(), &auth("right-pw"));
    let (status, detail) = doctor_coordination(&good.config).await;
    assert_eq!(status, "ok", "{detail}");
    assert!(detail.contains("no replica holds the lease now"), "{detail}");

    let bad = Replica::new(&rig, &etcd, &server.url(), &auth("wrong-pw"));
    let (status, detail) = doctor_coordination(&bad.config).await;
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.contains("coordination.etcd.password"), "{detail}");

    let mut gw = good.spawn().await;
    good.wait_role("active").await;
    let holder = good.instance().await;
    let (status, detail) = doctor_coordination(&good.config).await;
    assert_eq!(status, "ok", "{detail}");
    assert!(
        detail.contains(&format!("instance {holder} holds the lease")),
        "{detail}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(BOUND).await, Some(0), "{}", gw.stderr());

    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let unreachable = good.config.replace(
        &etcd.url(),
        &format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port()),
    );
    let (status, detail) = doctor_coordination(&unreachable).await;
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.contains("etcd does not answer"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_starts_no_stdio_child_until_it_becomes_the_active() {
    use crate::harness::{peer_script, python};
    let etcd = EtcdPeer::start().await;
    let rig = Rig::start("").await;
    // Each replica's child runs behind record.py, which logs one line per child life.
    let stdio = |tag: &str| {
        let argv = [
            python().display().to_string(),
            peer_script("stdio/record.py").display().to_string(),
            rig.dir.path().join(format!("{tag}.log")).display().to_string(),
            rig.dir.path().join(format!("{tag}.pid")).display().to_string(),
            "--".to_owned(),
            python().display().to_string(),
            peer_script("py_server.py").display().to_string(),
            "--mode".to_owned(),
            "stdio".to_owned(),
        ];
        format!("command = {}", serde_json::to_string(&argv).unwrap())
    };
    async fn session(r: &Replica) -> String {
        r.status().await["downstream"][0]["session"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    let placeholder = "http://127.0.0.1:9/mcp";
    let replica = |tag: &str| {
        let mut r = Replica::new(&rig, &etcd, placeholder, "");
        r.config = r.config.replace(&format!("url = \"{placeholder}\""), &stdio(tag));
        r
    };
    let lives = |tag: &str| {
        std::fs::read_to_string(rig.dir.path().join(format!("{tag}.log")))
            .map(|s| s.matches("\"record\": \"life\"").count())
            .unwrap_or(0)
    };
    let a = replica("a");
    let b = replica("b");
    // b is the active first, a the standby: a starts no child.
    let mut gb = b.spawn().await;
    b.wait_role("active").await;
    let mut ga = a.spawn().await;
    a.wait_role("standby").await;
    wait_until("b's child initialized", BOUND, || async {
        session(&b).await == "initialized"
    })
    .await;
    // A negative check needs time to pass: two renewal intervals as a standby.
    tokio::time::sleep(LEASE_TTL * 2 / 3).await;
    assert_eq!(lives("a"), 0, "a standby started its stdio child");

    // b frozen past its lease: a takes over and starts its child. b's child is killed
    // meanwhile; woken, b is a standby and must not start it again.
    gb.signal("STOP");
    a.wait_role("active").await;
    wait_until("a's child initialized", BOUND, || async {
        session(&a).await == "initialized"
    })
    .await;
    let pid = std::fs::read_to_string(rig.dir.path().join("b.pid")).unwrap();
    let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
    gb.signal("CONT");
    b.wait_role("standby").await;
    wait_until("b's child seen down", BOUND, || async {
        session(&b).await != "initialized"
    })
    .await;
    // Longer than the first restart backoffs (200 and 400 ms) and a renewal.
    tokio::time::sleep(LEASE_TTL).await;
    assert_eq!(
        lives("b"),
        1,
        "a demoted replica restarted its stdio child as a standby"
    );

    // a stopped: b is the active again and starts its child then.
    ga.sigterm();
    assert_eq!(ga.wait_exit(BOUND).await, Some(0), "{}", ga.stderr());
    b.wait_role("active").await;
    wait_until("b's child initialized again", BOUND, || async {
        session(&b).await == "initialized"
    })
    .await;
    assert_eq!(lives("b"), 2);
    let id = rig.enqueue_call("add", json!({"a": 2, "b": 3}));
    rig.wait("b's answer", |r| {
        r.responses_for(&id)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    gb.sigterm();
    assert_eq!(gb.wait_exit(BOUND).await, Some(0), "{}", gb.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_latched_start_hold_the_standby_that_latches_on_a_takeover_holds_instead_of_exiting() {
    let etcd = EtcdPeer::start().await;
    let server = Recorder::start().await;
    let rig = Rig::start("").await;
    let a = Replica::new(&rig, &etcd, &server.url(), "");
    let mut b = Replica::new(&rig, &etcd, &server.url(), "");
    b.config = b.config.replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut ga = a.spawn().await;
    a.wait_role("active").await;
    let mut gb = b.spawn().await;
    b.wait_role("standby").await;

    let held = call(&rig, "hold", "held", 0);
    wait_until("the held call at the server", BOUND, || async { server.count() == 1 }).await;
    ga.signal("KILL");
    assert_eq!(ga.wait_exit(BOUND).await, Some(128 + 9));
    // b latches on the intent, then holds on its latch file: up, not ready, the latch
    // on /status, never exiting until stopped.
    wait_until("b holding on its latch", BOUND, || async {
        b.status().await["fatal"]["category"] == "latched_previously"
    })
    .await;
    let stderr = gb.stderr();
    assert!(
        stderr.contains("category=interrupted_before_ack") && stderr.contains(&held),
        "{stderr}"
    );
    assert!(!gb.has_exited(), "held, not exited: {stderr}");
    let (code, _) = b.get("/readyz").await.unwrap();
    assert_eq!(code, 503);
    let metrics = b.get("/metrics").await.unwrap().1;
    assert!(
        metrics.contains("tunnelgate_fatal_info{category=\"interrupted_before_ack\"} 1"),
        "{metrics}"
    );
    assert_eq!(server.count(), 1, "nothing dispatched after the takeover");
    server.release();
    gb.sigterm();
    assert_eq!(gb.wait_exit(BOUND).await, Some(89), "{}", gb.stderr());
}
