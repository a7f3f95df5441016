//! Default mode at scale-out: several `tunnelgate run` replicas on one tunnel, against the
//! in-process simulator (one queue; each command is handed to one poll) and real MCP
//! servers. Every claim is checked against two records that do not come from the
//! gateway: the simulator's (which poll, of which instance, was handed which command;
//! which instance posted which answer, and whether it was acknowledged) and the MCP
//! server's own (which calls it executed: `py_server.py --record`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::{Dropped, NewCommand, Record, ResponseRecord, SimConfig, Simulator};

use crate::harness::{
    free_port, http_client, peer_script, python, server_everything_stdio_argv, spawn_http_peer, wait_for, ChildGuard,
    Gateway, KEY, TUNNEL,
};

/// The header every control-plane request of a gateway carries (random per process).
const INSTANCE: &str = "x-tunnel-client-instance-id";
/// What a caller is told for a command that never reached an MCP server.
const NOT_SENT: &str = "not delivered to the MCP server; safe to retry";
/// Bound on a replica's start (a debug binary, a stdio child's handshake).
const START: Duration = Duration::from_secs(30);
/// Bound on a whole load to be answered.
const LOAD: Duration = Duration::from_secs(45);
/// Commands of the steady load.
const COMMANDS: usize = 300;

/// One running replica: its process and the instance id its requests carry.
struct Replica {
    gateway: Gateway,
    instance: String,
    _dir: tempfile::TempDir,
}

/// How a command was answered, as the simulator recorded it.
#[derive(Debug)]
struct Answer {
    /// The instance whose poll was handed the command.
    received_by: String,
    /// The instance that posted its one terminal response.
    answered_by: String,
    /// The posted body (`resp_json`, `resp_code`, `resp_headers`, ...).
    body: Value,
}

/// What the caller of a `record_marker` call was told.
#[derive(Debug, PartialEq, Eq)]
enum Told {
    /// The MCP server's result: `recorded MARKER`.
    Result(String),
    /// "not delivered to the MCP server; safe to retry" (503).
    NotSent,
}

async fn start_sim() -> Simulator {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.max_poll_wait = Duration::from_millis(500);
    config.record_capacity = 1_000_000;
    config.completed_capacity = 1_000_000;
    Simulator::start(config).await.expect("the simulator starts")
}

/// The Python SDK server, stateless Streamable HTTP, recording each call it serves.
async fn spawn_recording_server(served: &Path) -> (ChildGuard, String) {
    let python = python();
    let script = peer_script("py_server.py");
    spawn_http_peer("py_server(record)", "/mcp", |port| {
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(&script)
            .args(["--port", &port.to_string(), "--mode", "stateless", "--record"])
            .arg(served)
            .env("PYTHONUNBUFFERED", "1");
        cmd
    })
    .await
}

/// What the MCP server executed: each marker and how many times.
fn served(path: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(path).expect("the record file").lines() {
        *counts.entry(line.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// `[control_plane]` extras and the `[mcp]` tables for replicas of one HTTP channel.
fn http_channel(url: &str) -> String {
    format!("max_inflight = 8\n\n[mcp]\nmax_concurrent = 4\n\n[mcp.channels.main]\nurl = \"{url}\"\n")
}

/// A replica's configuration: `body` continues `[control_plane]` (its keys first), then
/// holds the `[mcp]` tables.
fn replica_config(sim: &Simulator, ops_port: u16, dir: &Path, body: &str) -> String {
    format!(
        r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "1s"
post_timeout = "2s"
post_attempts = 3
{body}

[strict]
enabled = false
latch_file = "{latch}"
shutdown_grace = "5s"
cleanup_timeout = "2s"

[ops]
listen = "127.0.0.1:{ops_port}"

[telemetry]
log_format = "json"
log_level = "info"
"#,
        base = sim.base_url(),
        latch = dir.join("latch.json").display(),
    )
}

/// The instance ids of every gateway that polled so far.
fn instances(record: &Record) -> BTreeSet<String> {
    record
        .polls
        .iter()
        .filter_map(|p| p.header(INSTANCE).map(str::to_owned))
        .collect()
}

/// Starts a replica and returns it once `/readyz` answers 200 and its first poll has
/// reached the simulator (which names its instance id).
/// A recording HTTP MCP server (its record file, its process), the replicas' channel
/// tables for it, and three replicas of it on `sim`'s tunnel.
async fn three_replicas_of_a_recording_server(
    sim: &Simulator,
) -> (tempfile::NamedTempFile, ChildGuard, String, Vec<Replica>) {
    let record_file = tempfile::NamedTempFile::new().expect("record file");
    let (mcp, url) = spawn_recording_server(record_file.path()).await;
    let body = http_channel(&url);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(start_replica(sim, &body, &[]).await);
    }
    (record_file, mcp, body, replicas)
}

async fn start_replica(sim: &Simulator, body: &str, envs: &[(&str, &str)]) -> Replica {
    let known = instances(&sim.record());
    let dir = tempfile::tempdir().expect("tempdir");
    let ops_port = free_port();
    let config = replica_config(sim, ops_port, dir.path(), body);
    let mut gateway = Gateway::spawn(&["run"], Some(&config), envs);
    let readyz = format!("http://127.0.0.1:{ops_port}/readyz");
    let deadline = Instant::now() + START;
    loop {
        assert!(
            !gateway.has_exited(),
            "a replica exited while starting; stderr:\n{}",
            gateway.stderr()
        );
        if http_client().get(&readyz).send().await.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a replica was not ready within {START:?}; stderr:\n{}",
            gateway.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let instance = wait_for("the new replica's instance id at the simulator", START, || async {
        instances(&sim.record()).difference(&known).next().cloned()
    })
    .await;
    Replica {
        gateway,
        instance,
        _dir: dir,
    }
}

/// SIGTERM, then the exit code (bounded).
async fn stop(replica: &mut Replica) -> i32 {
    replica.gateway.sigterm();
    replica
        .gateway
        .wait_exit(Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("a replica did not stop; stderr:\n{}", replica.gateway.stderr()))
}

/// A `tools/call` of `record_marker`; the JSON-RPC id is the marker too.
fn record_call(marker: &str) -> NewCommand {
    NewCommand::jsonrpc(json!({
        "jsonrpc": "2.0", "id": marker, "method": "tools/call",
        "params": {"name": "record_marker", "arguments": {"marker": marker}}
    }))
}

fn terminal_count(record: &Record) -> usize {
    record.responses.iter().filter(|r| r.completed).count()
}

/// Checks the simulator's record for exactly once and returns each command's answer:
/// nothing dropped from the record; no terminal POST for a request id that was never
/// sent; and for each of `ids`, [`answer_of`].
fn answers(record: &Record, ids: &[String]) -> BTreeMap<String, Answer> {
    assert_eq!(record.dropped, Dropped::default(), "the record kept everything");
    let sent: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    for post in record
        .responses
        .iter()
        .filter(|r| r.resp_type.as_deref() != Some("jsonrpc_notify"))
    {
        let id = post.request_id.as_deref().expect("every POST names its request");
        assert!(sent.contains(id), "a terminal POST for {id}, which was never sent");
    }
    ids.iter().map(|id| (id.clone(), answer_of(record, id))).collect()
}

/// The answer to `id`: it was handed to exactly one poll, and got exactly one terminal
/// POST, acknowledged (`200 {"status":"ok"}`).
fn answer_of(record: &Record, id: &str) -> Answer {
    let handed: Vec<&str> = record
        .polls
        .iter()
        .filter(|p| p.request_ids.iter().any(|r| r == id))
        .map(|p| p.header(INSTANCE).expect("every poll names its instance"))
        .collect();
    assert_eq!(handed.len(), 1, "{id} was handed to {} polls", handed.len());
    let posts: Vec<&ResponseRecord> = record
        .responses_for(id)
        .filter(|r| r.resp_type.as_deref() != Some("jsonrpc_notify"))
        .collect();
    assert_eq!(
        posts.len(),
        1,
        "{id}: {} terminal POSTs (lost if 0, twice if 2)",
        posts.len()
    );
    let post = posts[0];
    assert!(
        post.status == Some(200) && post.completed,
        "{id}: not acknowledged ({:?})",
        post.status
    );
    Answer {
        received_by: handed[0].to_owned(),
        answered_by: post.header(INSTANCE).expect("POSTs name their instance").to_owned(),
        body: post.json.clone().expect("a JSON body"),
    }
}

fn told(answer: &Answer) -> Told {
    let resp = &answer.body["resp_json"];
    if let Some(text) = resp.pointer("/result/content/0/text").and_then(Value::as_str) {
        return Told::Result(text.to_owned());
    }
    let message = resp
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        message.contains(NOT_SENT) && answer.body["resp_code"] == 503,
        "neither a result nor \"{NOT_SENT}\": {}",
        answer.body
    );
    Told::NotSent
}

/// Which instance was handed how many of `answers`.
fn per_instance(answers: &BTreeMap<String, Answer>) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for answer in answers.values() {
        *counts.entry(answer.received_by.as_str()).or_insert(0) += 1;
    }
    counts
}

#[tokio::test]
async fn three_default_mode_replicas_share_a_tunnel_and_answer_every_command_exactly_once() {
    let started = Instant::now();
    let sim = start_sim().await;
    let (record_file, _mcp, _, mut replicas) = three_replicas_of_a_recording_server(&sim).await;
    let load = Instant::now();
    let markers: Vec<String> = (0..COMMANDS).map(|i| format!("a{i}")).collect();
    let ids: Vec<String> = markers.iter().map(|m| sim.enqueue(record_call(m))).collect();
    sim.wait_for("every command answered", LOAD, |r| terminal_count(r) >= COMMANDS)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let load_time = load.elapsed();

    let record = sim.record();
    let answers = answers(&record, &ids);
    for (id, marker) in ids.iter().zip(&markers) {
        let answer = &answers[id];
        assert_eq!(
            answer.received_by, answer.answered_by,
            "{id}: answered by another replica"
        );
        assert_eq!(told(answer), Told::Result(format!("recorded {marker}")), "{id}");
    }
    let counts = per_instance(&answers);
    for replica in &replicas {
        assert!(
            counts.get(replica.instance.as_str()).is_some_and(|n| *n > 0),
            "{counts:?}"
        );
    }
    let executed = served(record_file.path());
    assert_eq!(executed.len(), COMMANDS, "every call reached the MCP server");
    assert!(executed.values().all(|n| *n == 1), "a call executed twice");
    assert!(markers.iter().all(|m| executed.contains_key(m)));
    assert!(
        record
            .polls
            .iter()
            .all(|p| p.channels.is_empty() && !p.query.contains("channel=")),
        "no poll filter is sent when none is configured"
    );
    for replica in &mut replicas {
        assert_eq!(stop(replica).await, 0);
    }
    eprintln!(
        "3 replicas, {COMMANDS} commands answered in {load_time:?} (per replica {:?}); test {:?}",
        counts.values().collect::<Vec<_>>(),
        started.elapsed()
    );
}

/// The caller of the rolling-restart load: it keeps `TARGET` commands outstanding while
/// not paused, and sends again, with a new marker, each command it was told was not
/// delivered ("safe to retry"). Each logical command `i` has attempts `r{i}.{n}`.
struct Caller {
    /// Request id -> (logical command, marker).
    attempts: BTreeMap<String, (usize, String)>,
    /// Logical commands that got their result.
    done: BTreeSet<usize>,
    /// Request ids whose answer has been read.
    settled: BTreeSet<String>,
    next: usize,
    retries: usize,
}

impl Caller {
    const TARGET: usize = 24;

    fn new() -> Self {
        Self {
            attempts: BTreeMap::new(),
            done: BTreeSet::new(),
            settled: BTreeSet::new(),
            next: 0,
            retries: 0,
        }
    }

    fn send(&mut self, sim: &Simulator, logical: usize) {
        let n = self.attempts.values().filter(|(i, _)| *i == logical).count();
        let marker = format!("r{logical}.{n}");
        let id = sim.enqueue(record_call(&marker));
        self.attempts.insert(id, (logical, marker));
    }

    /// Reads new answers, retries the not-delivered ones and tops the load up (new
    /// commands only while `more`). Sends nothing while `paused`.
    fn step(&mut self, sim: &Simulator, paused: bool, more: bool) {
        if paused {
            return;
        }
        let record = sim.record();
        let mut retry = Vec::new();
        for post in record.responses.iter().filter(|r| r.completed) {
            let id = post.request_id.clone().expect("a request id");
            if !self.settled.insert(id.clone()) {
                continue;
            }
            let (logical, _) = self.attempts[&id].clone();
            let message = post.json.as_ref().and_then(|j| j.pointer("/resp_json/error/message"));
            if message.and_then(Value::as_str).is_some_and(|m| m.contains(NOT_SENT)) {
                retry.push(logical);
            } else {
                self.done.insert(logical);
            }
        }
        for logical in retry {
            self.retries += 1;
            self.send(sim, logical);
        }
        while more && self.attempts.len() - self.settled.len() < Self::TARGET {
            self.send(sim, self.next);
            self.next += 1;
        }
    }

    /// The request ids sent and not answered, with the instance each was handed to.
    fn unanswered(&self, record: &Record, executed: &BTreeMap<String, usize>) -> String {
        let pending: Vec<String> = self
            .attempts
            .keys()
            .filter(|id| !self.settled.contains(*id))
            .map(|id| {
                let to = record
                    .polls
                    .iter()
                    .find(|p| p.request_ids.contains(id))
                    .and_then(|p| p.header(INSTANCE));
                let marker = &self.attempts[id].1;
                format!("{id} {marker} (handed to {to:?}, executed {:?})", executed.get(marker))
            })
            .collect();
        pending.join(", ")
    }

    fn finished(&self) -> bool {
        self.done.len() == self.next
    }
}

/// Whether `instance` has no poll open at the simulator (each answered or abandoned).
fn no_open_poll(record: &Record, instance: &str) -> bool {
    record
        .polls
        .iter()
        .filter(|p| p.header(INSTANCE) == Some(instance))
        .all(|p| p.status.is_some() || p.abandoned)
}

#[tokio::test]
async fn a_rolling_restart_under_load_loses_nothing_and_answers_nothing_twice() {
    let started = Instant::now();
    let sim = start_sim().await;
    let (record_file, _mcp, body, mut replicas) = three_replicas_of_a_recording_server(&sim).await;
    let mut caller = Caller::new();
    let paused = std::cell::Cell::new(false);
    let stage = std::cell::Cell::new(String::from("starting"));
    let stopped_logs = std::cell::RefCell::new(Vec::<(String, String)>::new());
    let restarting = std::cell::Cell::new(true);
    let mut stopped = Vec::new();
    let load = async {
        let deadline = Instant::now() + LOAD;
        while restarting.get() || caller.next < COMMANDS || !caller.finished() {
            let more = restarting.get() || caller.next < COMMANDS;
            caller.step(&sim, paused.get(), more);
            if Instant::now() >= deadline {
                let executed = served(record_file.path());
                let logs: Vec<String> = stopped_logs
                    .borrow()
                    .iter()
                    .map(|(instance, log)| format!("---- stopped replica {instance} ----\n{log}"))
                    .collect();
                panic!(
                    "the load did not finish within {LOAD:?} (restarts at: {}; stopped: {:?}); unanswered: {}\n{}",
                    stage.take(),
                    stopped_logs.borrow().iter().map(|(i, _)| i.clone()).collect::<Vec<_>>(),
                    caller.unanswered(&sim.record(), &executed),
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let restarts = async {
        for (k, replica) in replicas.iter_mut().enumerate() {
            stage.set(format!("replica {k} ({}): load before the restart", replica.instance));
            // Under load: wait until this round has answered a share of its own.
            let floor = terminal_count(&sim.record()) + 40;
            sim.wait_for("load before the restart", LOAD, |r| terminal_count(r) >= floor)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            // The stop drops the replica's open long poll, and a poll it had sent may
            // still be unread at the simulator: neither may be handed a command (docs/replicas.md:
            // the window of a stop). So the caller pauses until every queued command has
            // been handed out, and resumes once the replica has exited (every connection
            // of it closed, so a request still unread is dropped unanswered) and has no
            // poll open. Meanwhile the replica answers what it prefetched and what it
            // has in flight, and the other replicas finish theirs.
            paused.set(true);
            stage.set(format!("replica {k} ({}): draining the queue", replica.instance));
            sim.wait_for("the queue handed out", LOAD, |r| r.issued() == r.commands.len())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let instance = replica.instance.clone();
            replica.gateway.sigterm();
            stage.set(format!("replica {k} ({instance}): SIGTERM sent, waiting for the exit"));
            let code = replica.gateway.wait_exit(Duration::from_secs(20)).await;
            assert_eq!(code, Some(0), "stderr:\n{}", replica.gateway.stderr());
            assert!(replica.gateway.stderr().contains("polling stopped"));
            sim.wait_for("no poll of the stopped replica open", LOAD, |r| {
                no_open_poll(r, &instance)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            paused.set(false);
            stopped_logs
                .borrow_mut()
                .push((instance.clone(), replica.gateway.stderr()));
            stopped.push(instance);
            stage.set(format!("replica {k}: starting again"));
            *replica = start_replica(&sim, &body, &[]).await;
        }
        stage.set("done".to_owned());
        restarting.set(false);
    };
    tokio::join!(load, restarts);

    let record = sim.record();
    let ids: Vec<String> = caller.attempts.keys().cloned().collect();
    let answers = answers(&record, &ids);
    let executed = served(record_file.path());
    let mut not_sent_by = BTreeMap::<&str, usize>::new();
    for (id, answer) in &answers {
        assert_eq!(
            answer.received_by, answer.answered_by,
            "{id}: a stopping replica left it to another"
        );
        let marker = &caller.attempts[id].1;
        match told(answer) {
            Told::Result(text) => {
                assert_eq!(text, format!("recorded {marker}"));
                assert_eq!(executed.get(marker), Some(&1), "{marker} executed once");
            }
            Told::NotSent => {
                assert_eq!(executed.get(marker), None, "{marker}: told not delivered, yet executed");
                *not_sent_by.entry(answer.answered_by.as_str()).or_insert(0) += 1;
            }
        }
    }
    assert!(
        not_sent_by.keys().all(|i| stopped.iter().any(|s| s == i)),
        "only a stopping replica answers \"not delivered\": {not_sent_by:?}"
    );
    assert_eq!(caller.done.len(), caller.next, "every logical command got its result");
    assert_eq!(executed.len(), caller.next, "and the MCP server executed each once");
    let received = per_instance(&answers);
    for instance in &stopped {
        assert!(received.get(instance.as_str()).is_some_and(|n| *n > 0), "{received:?}");
    }
    for replica in &mut replicas {
        assert_eq!(stop(replica).await, 0);
    }
    eprintln!(
        "rolling restart of 3 replicas: {} commands ({} attempts, {} retried after \"not delivered\" from a stopping replica: {:?}), test {:?}",
        caller.next,
        ids.len(),
        caller.retries,
        not_sent_by.values().collect::<Vec<_>>(),
        started.elapsed()
    );
}

#[tokio::test]
async fn poll_channels_split_a_tunnels_channels_between_replicas() {
    let sim = start_sim().await;
    let record_file = tempfile::NamedTempFile::new().expect("record file");
    let (_mcp, url) = spawn_recording_server(record_file.path()).await;
    let channels = format!(
        "\n[mcp]\nmax_concurrent = 4\n\n[mcp.channels.alpha]\nurl = \"{url}\"\n\n[mcp.channels.beta]\nurl = \"{url}\"\n\n[mcp.channels.gamma]\nurl = \"{url}\"\n"
    );
    // One replica takes the official client's variable, the other the TOML key, its
    // names unsorted and repeated.
    let first = start_replica(&sim, &channels, &[("CONTROL_PLANE_POLL_CHANNELS", "alpha")]).await;
    let second_body = format!("poll_channels = [\"gamma\", \"beta\", \"gamma\"]\n{channels}");
    let second = start_replica(&sim, &second_body, &[]).await;
    let sent: Vec<(String, &str)> = (0..60)
        .map(|i| {
            let channel = ["alpha", "beta", "gamma"][i % 3];
            let marker = format!("{channel}{i}");
            (sim.enqueue(record_call(&marker).channel(channel)), channel)
        })
        .collect();
    sim.wait_for("every command answered", LOAD, |r| terminal_count(r) >= sent.len())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let record = sim.record();
    for poll in &record.polls {
        let instance = poll.header(INSTANCE).unwrap();
        let (filter, query): (&[&str], &str) = if instance == first.instance {
            (&["alpha"], "&channel=alpha")
        } else {
            assert_eq!(instance, second.instance);
            (&["beta", "gamma"], "&channel=beta&channel=gamma")
        };
        assert_eq!(poll.channels, filter, "{}", poll.query);
        assert!(poll.query.ends_with(query), "{}", poll.query);
    }
    let ids: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
    let answers = answers(&record, &ids);
    for (id, channel) in &sent {
        let answer = &answers[id];
        let expected = if *channel == "alpha" {
            &first.instance
        } else {
            &second.instance
        };
        assert_eq!(
            &answer.received_by, expected,
            "{id} ({channel}) reached the wrong replica"
        );
        assert_eq!(answer.answered_by, answer.received_by);
        assert_eq!(answer.body["channel"], *channel);
        assert!(matches!(told(answer), Told::Result(_)));
    }
    assert_eq!(served(record_file.path()).len(), sent.len());
}

#[tokio::test]
async fn a_listed_channel_that_is_not_configured_is_refused_at_start() {
    let toml = format!(
        "[control_plane]\ntunnel_id = \"{TUNNEL}\"\napi_key = \"k\"\npoll_channels = [\"main\", \"tools\"]\n\n[mcp.channels.main]\nurl = \"http://127.0.0.1:9/mcp\"\n"
    );
    let run = Gateway::cli(&["check"], Some(&toml), &[], Duration::from_secs(20)).await;
    assert_eq!(run.code, 78, "stderr: {}", run.stderr);
    assert!(
        run.stderr
            .contains("control_plane.poll_channels[1]: \"tools\" is not a configured channel"),
        "{}",
        run.stderr
    );
}

/// A command on the stdio channel, with the caller's `Mcp-Session-Id`.
fn in_session(message: Value, session: &str) -> NewCommand {
    NewCommand::jsonrpc(message).header("Mcp-Session-Id", session)
}

async fn answered(sim: &Simulator, id: &str) -> Answer {
    sim.wait_for("the answer", LOAD, |r| r.is_completed(id))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    answer_of(&sim.record(), id)
}

#[tokio::test]
async fn a_stdio_session_spans_replicas_but_the_state_its_child_kept_does_not() {
    let sim = start_sim().await;
    let argv: Vec<String> = server_everything_stdio_argv();
    let stdio = format!(
        "max_inflight = 1\n\n[mcp]\nmax_concurrent = 1\n\n[mcp.channels.main]\ncommand = {}\n",
        serde_json::to_string(&argv).unwrap()
    );
    let mut a = start_replica(&sim, &stdio, &[]).await;

    // Through A alone: initialize, then a tool that leaves a resource in A's child.
    let init = sim.enqueue(NewCommand::jsonrpc(json!({
        "jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replicas-test", "version": "1"}}
    })));
    let init = answered(&sim, &init).await;
    assert_eq!(init.received_by, a.instance);
    let session = init.body["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap_or_else(|| panic!("a minted Mcp-Session-Id: {}", init.body))
        .to_owned();
    let note =
        json!({"name": "replicas-note.txt", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resourceLink"});
    let gzip = sim.enqueue(in_session(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "gzip-file-as-resource", "arguments": note}}),
        &session,
    ));
    let gzip = answered(&sim, &gzip).await;
    let uri = gzip.body["resp_json"]["result"]["content"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("a resource link: {}", gzip.body))
        .to_owned();
    let read = |id: u32| {
        in_session(
            json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}}),
            &session,
        )
    };
    let on_a = answered(&sim, &sim.enqueue(read(2))).await;
    assert_eq!(on_a.received_by, a.instance);
    assert!(
        on_a.body["resp_json"]["result"]["contents"][0]["blob"].is_string(),
        "{}",
        on_a.body
    );

    // A busy (its one slot taken by a long call): the next commands wait for B.
    let long = sim.enqueue(NewCommand::jsonrpc(json!({
        "jsonrpc": "2.0", "id": "long", "method": "tools/call",
        "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 8, "steps": 1}}
    })));
    sim.wait_for("the long call handed to A", LOAD, |r| {
        r.polls.iter().any(|p| p.request_ids.contains(&long))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let echo = sim.enqueue(in_session(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "on B"}}}),
        &session,
    ));
    let read_b = sim.enqueue(read(4));
    let mut b = start_replica(&sim, &stdio, &[]).await;
    let echo = answered(&sim, &echo).await;
    let read_b = answered(&sim, &read_b).await;
    assert_eq!((&echo.received_by, &read_b.received_by), (&b.instance, &b.instance));
    // The session the caller opened through A works on B: B's child has its own.
    assert_eq!(echo.body["resp_json"]["result"]["content"][0]["text"], "Echo: on B");
    // What A's child kept is not there: the server's answer for an unknown resource.
    assert_eq!(
        read_b.body["resp_json"]["error"],
        json!({"code": -32602, "message": format!("MCP error -32602: Resource {uri} not found")}),
        "{}",
        read_b.body
    );

    // And it is still in A's child once B is gone.
    let long = answered(&sim, &long).await;
    assert!(long.body["resp_json"]["result"].is_object(), "{}", long.body);
    assert_eq!(stop(&mut b).await, 0);
    let again = answered(&sim, &sim.enqueue(read(5))).await;
    assert_eq!(again.received_by, a.instance);
    assert_eq!(again.body["resp_json"]["result"], on_a.body["resp_json"]["result"]);
    assert_eq!(stop(&mut a).await, 0);
}

#[tokio::test]
async fn an_http_session_kept_in_one_servers_memory_is_unknown_to_another_replicas_server() {
    // One server per replica (a sidecar per pod), each keeping its sessions in memory.
    let sim = start_sim().await;
    let (_first, first_url) = crate::harness::spawn_py_server(crate::harness::PyMode::Json).await;
    let (_second, second_url) = crate::harness::spawn_py_server(crate::harness::PyMode::Json).await;
    let mut a = start_replica(&sim, &http_channel(&first_url), &[]).await;
    let init = sim.enqueue(NewCommand::jsonrpc(json!({
        "jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replicas-test", "version": "1"}}
    })));
    let init = answered(&sim, &init).await;
    let session = init.body["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap_or_else(|| panic!("the server's Mcp-Session-Id: {}", init.body))
        .to_owned();
    let call = |id: u32| {
        in_session(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "hi"}}}),
            &session,
        )
    };
    let on_a = answered(&sim, &sim.enqueue(call(1))).await;
    assert_eq!(on_a.body["resp_json"]["result"]["content"][0]["text"], "Echo: hi");
    // A is replaced by B, whose own server never saw the session.
    assert_eq!(stop(&mut a).await, 0);
    let mut b = start_replica(&sim, &http_channel(&second_url), &[]).await;
    let on_b = answered(&sim, &sim.enqueue(call(2))).await;
    assert_eq!(on_b.received_by, b.instance);
    // The caller gets that server's own answer for an unknown session, as it sent it.
    assert_eq!(on_b.body["resp_code"], 404, "{}", on_b.body);
    assert_eq!(
        on_b.body["resp_json"],
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Session not found"}})
    );
    assert_eq!(stop(&mut b).await, 0);
}
