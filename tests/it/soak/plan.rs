//! Seeded plans: every command of a soak run, the fault each one meets on the MCP side
//! and on its response POSTs, and the poll faults, all drawn from one `StdRng` seeded
//! with the run's seed. The same seed gives the same plan (with the same `rand`
//! version); timing (which poll carries which command) is left to the machine.
//!
//! A plan is turned into the simulator's fault script (TOML, rules by `order`, poll
//! faults by `nth`) and into the commands the test queues, in order, so a command's
//! queue order is its index + 1.

use std::fmt::Write as _;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

/// Channel names in the gateway's configuration.
pub(super) const HTTP: &str = "main";
pub(super) const REFUSED: &str = "refused";
pub(super) const STDIO: &str = "pipe";
pub(super) const NOWHERE: &str = "nowhere";

/// Where a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// The fault-injecting HTTP server.
    Http,
    /// A closed port: every connect is refused.
    Refused,
    /// The stdio peer.
    Stdio,
}

/// What the MCP server does with a call (carried in `arguments.fault`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Mcp {
    /// HTTP: a JSON answer. stdio: an answer.
    Ok,
    /// HTTP: an SSE answer after N log notifications.
    Sse(u32),
    /// An answer after this many ms (the command has no `response_timeout`).
    Slow(u64),
    /// An answer after `sleep_ms`, past the command's `response_timeout` of `timeout_ms`.
    Late { timeout_ms: u64, sleep_ms: u64 },
    /// Never answers in time (no `response_timeout`); strict runs stop the gateway meanwhile.
    Hang,
    /// HTTP: reset after reading the request.
    Reset,
    /// HTTP: closed after reading the request.
    Close,
    /// HTTP: an SSE stream with N notifications, cut before the answer.
    Cut(u32),
    /// HTTP: half of the JSON body.
    Truncated,
    /// HTTP: a whole JSON-RPC answer for another id (not this request's answer).
    WrongId,
    /// HTTP: a JSON-RPC error for this id, with this HTTP status (an answer).
    RpcError(u16),
    /// HTTP: this status without a JSON-RPC body, with or without `Retry-After`.
    Status(u16, bool),
    /// stdio: the child exits after reading the request.
    Die,
    /// stdio: the child writes part of the answer, then exits.
    DiePartial,
}

/// One command of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Call {
        route: Route,
        mcp: Mcp,
    },
    /// A JSON-RPC notification to the HTTP server (answered `202`, `notify_ack`).
    Notification,
    /// `session_termination` to the HTTP server, answered with this status.
    SessionEnd(u16),
    /// `response_timeout = "0s"`: dropped at receipt.
    Expired,
    /// `command_type = "teleport"` carrying a notification: dropped, never answered.
    UnknownType,
    /// A channel nobody configured: answered "not delivered".
    Unroutable,
    /// A malformed envelope (no `jsonrpc`) with a request id: answered "malformed".
    Invalid,
    /// A caller's reply that matches no server request: `notify_ack` 409.
    UnmatchedReply,
}

/// A fault on one response POST attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Post {
    Hold,
    Close,
    Status(u16, bool),
    Delay(u64),
}

/// How the gateway classifies one POST attempt (`delivery_attempts_total{result}`).
pub(super) fn attempt_result(post: Option<&Post>) -> &'static str {
    match post {
        None | Some(Post::Delay(_)) => "ok",
        Some(Post::Hold) => "timeout",
        Some(Post::Close) => "transport_after_write",
        Some(Post::Status(404, _)) => "not_found",
        Some(Post::Status(s, _)) if is_retryable(*s) => "retryable_status",
        Some(Post::Status(..)) => "rejected_status",
    }
}

pub(super) fn is_retryable(status: u16) -> bool {
    matches!(status, 408 | 429 | 502 | 503 | 504)
}

/// The delivery a last attempt settles (`deliveries_total{outcome}`).
pub(super) fn delivery_of(result: &str) -> &'static str {
    match result {
        "ok" => "acked",
        "not_found" => "not_found",
        "rejected_status" => "rejected",
        _ => "ambiguous",
    }
}

/// The strict category a last attempt latches (docs/strict-mode.md's table).
pub(super) fn category_of(result: &str) -> Option<&'static str> {
    match result {
        "ok" => None,
        "not_found" => Some("ack_not_found"),
        "rejected_status" => Some("ack_rejected"),
        "retryable_status" => Some("ack_retries_exhausted"),
        "transport_after_write" => Some("ack_connection_lost"),
        "timeout" => Some("ack_timeout"),
        other => panic!("no category for attempt result {other}"),
    }
}

/// The category a strict gateway must latch for the first faulted dispatched command,
/// derived from its injected faults alone: an abandoned leg (reset, close, cut stream,
/// truncated body, 5xx or 408 without a JSON-RPC body, a dying child) latches
/// `downstream_ambiguous`; an answer past the `response_timeout` `deadline_expired`; a stop
/// while it runs `stopped_before_ack`; otherwise the last POST attempt decides.
pub(super) fn derived_category(c: &Cmd, attempts: u32) -> Option<&'static str> {
    let Kind::Call { mcp, .. } = &c.kind else {
        return None;
    };
    match mcp {
        Mcp::Late { .. } => Some("deadline_expired"),
        Mcp::Hang => Some("stopped_before_ack"),
        Mcp::Reset | Mcp::Close | Mcp::Cut(_) | Mcp::Truncated | Mcp::WrongId | Mcp::Die | Mcp::DiePartial => {
            Some("downstream_ambiguous")
        }
        Mcp::Status(s, _) if *s >= 500 || *s == 408 => Some("downstream_ambiguous"),
        Mcp::Ok | Mcp::Sse(_) | Mcp::Slow(_) | Mcp::Status(..) | Mcp::RpcError(_) => {
            category_of(c.expected_attempts(attempts).last().copied().unwrap_or("ok"))
        }
    }
}

pub(super) fn exit_code_of(category: &str) -> i32 {
    match category {
        "ack_timeout" => 80,
        "ack_connection_lost" => 81,
        "ack_not_found" => 82,
        "ack_rejected" => 83,
        "ack_retries_exhausted" => 84,
        "deadline_expired" => 85,
        "stopped_before_ack" => 86,
        "downstream_ambiguous" => 87,
        "internal_error" => 88,
        other => panic!("unknown category {other}"),
    }
}

#[derive(Clone, Debug)]
pub(super) struct Cmd {
    pub index: usize,
    /// Unique per command (and per run): what the MCP servers record.
    pub marker: String,
    pub kind: Kind,
    /// The JSON-RPC id, when the command carries a request.
    pub rpc_id: Value,
    /// Faults of terminal POST attempts 1, 2, ...; `None` (or past the end): none.
    pub post: Vec<Option<Post>>,
    /// Faults of its notification POSTs 1, 2, ... (all notifications of the command,
    /// retries included, in the order they are posted).
    pub notify: Vec<Option<Post>>,
}

impl Cmd {
    /// The queue order (1-based) the simulator's rules select on.
    pub(super) fn order(&self) -> u64 {
        self.index as u64 + 1
    }

    /// The POST attempt results the gateway should go through, given `attempts` in all.
    pub(super) fn expected_attempts(&self, attempts: u32) -> Vec<&'static str> {
        let mut out = Vec::new();
        for j in 0..attempts as usize {
            let r = attempt_result(self.post.get(j).and_then(Option::as_ref));
            out.push(r);
            if matches!(r, "ok" | "not_found" | "rejected_status") {
                break;
            }
        }
        out
    }

    /// Notifications the MCP server sends before its answer (or before the cut).
    pub(super) fn notes(&self) -> u32 {
        match &self.kind {
            Kind::Call {
                route: Route::Http,
                mcp: Mcp::Sse(k) | Mcp::Cut(k),
            } => *k,
            _ => 0,
        }
    }

    /// The notification POST attempt results the gateway should go through, and the
    /// delivery of each notification posted. A notification is retried only after a 429
    /// (docs/outcomes.md: "Notification POSTs retry only 429 and failures before the write"); once
    /// one is not acknowledged, the later ones of the command are skipped.
    pub(super) fn expected_notify(&self, attempts: u32) -> (Vec<&'static str>, Vec<&'static str>) {
        let (mut results, mut deliveries) = (Vec::new(), Vec::new());
        let mut i = 0;
        for _ in 0..self.notes() {
            let mut tries = 0;
            loop {
                let post = self.notify.get(i).and_then(Option::as_ref);
                let r = attempt_result(post);
                i += 1;
                tries += 1;
                results.push(r);
                if r != "ok" && matches!(post, Some(Post::Status(429, _))) && tries < attempts {
                    continue;
                }
                deliveries.push(delivery_of(r));
                break;
            }
            if deliveries.last() != Some(&"acked") {
                break;
            }
        }
        (results, deliveries)
    }

    /// Whether the gateway posts a terminal answer for it (leaving aside a late call,
    /// which never gets one).
    pub(super) fn posts(&self) -> bool {
        !matches!(
            self.kind,
            Kind::Expired
                | Kind::UnknownType
                | Kind::Call {
                    mcp: Mcp::Late { .. },
                    ..
                }
        )
    }

    /// Whether the request reaches an MCP server when all goes as planned.
    pub(super) fn reaches_server(&self) -> bool {
        match &self.kind {
            Kind::Call { route, .. } => *route != Route::Refused,
            Kind::Notification | Kind::SessionEnd(_) => true,
            _ => false,
        }
    }

    pub(super) fn route(&self) -> Option<Route> {
        match &self.kind {
            Kind::Call { route, .. } => Some(*route),
            Kind::Notification | Kind::SessionEnd(_) => Some(Route::Http),
            _ => None,
        }
    }

    pub(super) fn channel(&self) -> &'static str {
        match self.route() {
            Some(Route::Http) | None => HTTP,
            Some(Route::Refused) => REFUSED,
            Some(Route::Stdio) => STDIO,
        }
    }

    fn fault_arg(&self) -> String {
        let Kind::Call { mcp, route } = &self.kind else {
            return "json".to_owned();
        };
        let stdio = *route == Route::Stdio;
        match mcp {
            Mcp::Ok if stdio => "ok".to_owned(),
            Mcp::Ok => "json".to_owned(),
            Mcp::Sse(n) => format!("sse:{n}"),
            Mcp::Slow(ms) => format!("slow:{ms}"),
            Mcp::Late { sleep_ms, .. } => format!("slow:{sleep_ms}"),
            Mcp::Hang => "slow:20000".to_owned(),
            Mcp::Reset => "reset".to_owned(),
            Mcp::Close => "close".to_owned(),
            Mcp::Cut(n) => format!("cut:{n}"),
            Mcp::Truncated => "truncated".to_owned(),
            Mcp::WrongId => "wrongid".to_owned(),
            Mcp::RpcError(s) => format!("rpcerror:{s}"),
            Mcp::Status(s, ra) => format!("status:{s}{}", if *ra { ":ra" } else { "" }),
            Mcp::Die => "die".to_owned(),
            Mcp::DiePartial => "die_partial".to_owned(),
        }
    }

    /// What the test queues at the simulator.
    pub(super) fn queued(&self) -> Queued {
        let call = |route_channel: &str| {
            NewCommand::jsonrpc(json!({
                "jsonrpc": "2.0", "id": self.rpc_id, "method": "tools/call",
                "params": {"name": "soak", "arguments": {"soak": self.marker, "fault": self.fault_arg()}}
            }))
            .channel(route_channel)
        };
        match &self.kind {
            Kind::Call { mcp, .. } => {
                let cmd = call(self.channel());
                Queued::Command(match mcp {
                    Mcp::Late { timeout_ms, .. } => cmd.response_timeout(format!("{timeout_ms}ms")),
                    _ => cmd,
                })
            }
            Kind::Notification => Queued::Command(NewCommand::jsonrpc(json!({
                "jsonrpc": "2.0", "method": "notifications/soak", "params": {"soak": self.marker}
            }))),
            Kind::SessionEnd(status) => Queued::Command(NewCommand::session_termination(Some(&format!(
                "sess-{}-{status}",
                self.marker
            )))),
            Kind::Expired => Queued::Command(call(HTTP).response_timeout("0s")),
            // Without a JSON-RPC request: nobody waits for an answer, so it is skipped (an
            // unknown type carrying a request is answered, see `tests/it/oauth.rs`).
            Kind::UnknownType => Queued::Command(
                NewCommand::jsonrpc(json!({
                    "jsonrpc": "2.0", "method": "notifications/soak", "params": {"soak": self.marker}
                }))
                .channel(HTTP)
                .command_type("teleport"),
            ),
            Kind::Unroutable => Queued::Command(call(NOWHERE)),
            Kind::Invalid => Queued::Raw {
                request_id: format!("req_soak_invalid_{}", self.marker),
                raw: json!({
                    "request_id": format!("req_soak_invalid_{}", self.marker),
                    "shard_token": format!("shard_soak_{}", self.marker),
                    "command_type": "jsonrpc",
                    "channel": HTTP,
                    "created_at": "2026-01-01T00:00:00Z",
                    "headers": {}
                }),
            },
            Kind::UnmatchedReply => Queued::Command(NewCommand::jsonrpc(json!({
                "jsonrpc": "2.0", "id": format!("reply-{}", self.marker), "result": {}
            }))),
        }
    }
}

pub(super) enum Queued {
    Command(NewCommand),
    Raw { request_id: String, raw: Value },
}

/// A poll fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PollFault {
    Status(u16, bool),
    Close,
    Hold,
    Delay(u64),
    Extra(u32),
}

/// A whole run.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub seed: u64,
    pub commands: Vec<Cmd>,
    pub polls: Vec<(u64, PollFault)>,
}

/// Picks an index by weight.
fn pick(rng: &mut StdRng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut x = rng.random_range(0..total);
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    unreachable!("x < total")
}

fn rpc_id(rng: &mut StdRng, index: usize, marker: &str) -> Value {
    if rng.random_bool(0.5) {
        json!(index as u64 + 1)
    } else {
        json!(format!("rpc-{marker}"))
    }
}

fn retryable(rng: &mut StdRng) -> u16 {
    [408, 429, 502, 503, 504][rng.random_range(0..5)]
}

fn rejecting(rng: &mut StdRng) -> u16 {
    [400, 401, 403, 413, 500][rng.random_range(0..5)]
}

/// A POST fault sequence that may end anywhere (default mode).
fn any_post(rng: &mut StdRng, attempts: u32) -> Vec<Option<Post>> {
    let mut seq = Vec::new();
    for j in 0..attempts {
        // hold, close, retryable, 404, rejecting, delay, no fault from here on
        let w = [10, 15, 30, 8, 8, 10, if j == 0 { 0 } else { 19 }];
        let post = match pick(rng, &w) {
            0 => Post::Hold,
            1 => Post::Close,
            2 => Post::Status(retryable(rng), rng.random_bool(0.15)),
            3 => Post::Status(404, false),
            4 => Post::Status(rejecting(rng), false),
            5 => Post::Delay(rng.random_range(10..200)),
            _ => break,
        };
        let settles =
            !matches!(post, Post::Hold | Post::Close) && !matches!(post, Post::Status(s, _) if is_retryable(s));
        seq.push(Some(post));
        if settles {
            break;
        }
    }
    seq
}

/// Faults on early attempts only: the delivery ends `acked`.
fn benign_post(rng: &mut StdRng, attempts: u32) -> Vec<Option<Post>> {
    match pick(rng, &[60, 10, 10, 10, 10]) {
        0 => Vec::new(),
        1 => vec![Some(Post::Hold)],
        2 => vec![Some(Post::Close)],
        3 => {
            let n = rng.random_range(1..attempts as usize);
            (0..n).map(|_| Some(Post::Status(retryable(rng), false))).collect()
        }
        _ => vec![Some(Post::Delay(rng.random_range(10..150)))],
    }
}

/// Faults on `len` notification POSTs.
fn notify_post(rng: &mut StdRng, len: u32) -> Vec<Option<Post>> {
    (0..len)
        .map(|_| match pick(rng, &[40, 8, 8, 25, 12, 7]) {
            0 => None,
            1 => Some(Post::Hold),
            2 => Some(Post::Close),
            3 => Some(Post::Status(429, rng.random_bool(0.2))),
            4 => Some(Post::Status([404, 500, 503][rng.random_range(0..3)], false)),
            _ => Some(Post::Delay(rng.random_range(10..150))),
        })
        .collect()
}

/// Notification faults for a command that sends notifications, sometimes.
fn maybe_notify(rng: &mut StdRng, kind: &Kind, attempts: u32) -> Vec<Option<Post>> {
    let notes = match kind {
        Kind::Call {
            route: Route::Http,
            mcp: Mcp::Sse(k) | Mcp::Cut(k),
        } => *k,
        _ => 0,
    };
    if notes > 0 && rng.random_bool(0.3) {
        notify_post(rng, notes * attempts)
    } else {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------------------
// Default mode
// ---------------------------------------------------------------------------------------

/// Child deaths per default-mode run: each restart waits out the stdio backoff.
pub(super) const MAX_DEATHS: usize = 5;

/// The default-mode plan: `n` commands, `attempts` terminal POST attempts.
pub(super) fn default_plan(seed: u64, n: usize, attempts: u32) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut deaths = 0;
    let mut commands = Vec::with_capacity(n);
    for index in 0..n {
        let marker = format!("s{seed}c{index}");
        let kind = match pick(&mut rng, &[880, 30, 20, 20, 15, 15, 10, 10]) {
            0 => match pick(&mut rng, &[85, 5, 10]) {
                0 => Kind::Call {
                    route: Route::Http,
                    mcp: match pick(&mut rng, &[50, 16, 4, 2, 5, 3, 5, 5, 10, 2, 3]) {
                        0 => Mcp::Ok,
                        1 => Mcp::Sse(rng.random_range(0..3)),
                        2 => Mcp::Slow(rng.random_range(20..300)),
                        3 => Mcp::Late {
                            timeout_ms: 700,
                            sleep_ms: 2500,
                        },
                        4 => Mcp::Reset,
                        5 => Mcp::Close,
                        6 => Mcp::Cut(rng.random_range(0..2)),
                        7 => Mcp::Truncated,
                        8 => Mcp::Status(
                            [404, 408, 429, 500, 502, 503, 504][rng.random_range(0..7)],
                            rng.random_bool(0.5),
                        ),
                        9 => Mcp::WrongId,
                        _ => Mcp::RpcError([200, 400, 500][rng.random_range(0..3)]),
                    },
                },
                1 => Kind::Call {
                    route: Route::Refused,
                    mcp: Mcp::Ok,
                },
                _ => Kind::Call {
                    route: Route::Stdio,
                    mcp: match pick(&mut rng, &[90, 8, 1, 1]) {
                        2 | 3 if deaths >= MAX_DEATHS => Mcp::Ok,
                        0 => Mcp::Ok,
                        1 => Mcp::Slow(rng.random_range(5..100)),
                        2 => {
                            deaths += 1;
                            Mcp::Die
                        }
                        _ => {
                            deaths += 1;
                            Mcp::DiePartial
                        }
                    },
                },
            },
            1 => Kind::Notification,
            2 => Kind::SessionEnd([200, 204, 404][rng.random_range(0..3)]),
            3 => Kind::Expired,
            4 => Kind::UnknownType,
            5 => Kind::Unroutable,
            6 => Kind::Invalid,
            _ => Kind::UnmatchedReply,
        };
        let rpc_id = rpc_id(&mut rng, index, &marker);
        let post = if rng.random_bool(0.15) {
            any_post(&mut rng, attempts)
        } else {
            Vec::new()
        };
        let notify = maybe_notify(&mut rng, &kind, attempts);
        commands.push(Cmd {
            index,
            marker,
            kind,
            rpc_id,
            post,
            notify,
        });
    }
    // Poll faults, on polls every run makes (it takes at least n / 25 polls): one in
    // about 30 of them, at least 3.
    let polls_made = (n as u64 / 25).max(10);
    let mut nths: Vec<u64> = Vec::new();
    while (nths.len() as u64) < (polls_made / 30).max(3) {
        let nth = rng.random_range(2..=polls_made);
        if !nths.contains(&nth) {
            nths.push(nth);
        }
    }
    nths.sort_unstable();
    let mut polls: Vec<(u64, PollFault)> = nths
        .into_iter()
        .map(|nth| {
            let fault = match pick(&mut rng, &[60, 15, 20, 5]) {
                0 => PollFault::Status(
                    [404, 408, 429, 500, 502, 503, 504][rng.random_range(0..7)],
                    rng.random_bool(0.15),
                ),
                1 => PollFault::Close,
                2 => PollFault::Delay(rng.random_range(50..400)),
                _ => PollFault::Extra(rng.random_range(5..40)),
            };
            (nth, fault)
        })
        .collect();
    // One held poll (the gateway waits out its poll deadline, ~11 s) in large runs.
    if n >= 2000 {
        let nth = rng.random_range(5..polls_made / 2);
        polls.retain(|(p, _)| *p != nth);
        polls.push((nth, PollFault::Hold));
        polls.sort_by_key(|(p, _)| *p);
    }
    Plan { seed, commands, polls }
}

// ---------------------------------------------------------------------------------------
// Strict mode
// ---------------------------------------------------------------------------------------

/// A strict run: commands before the latching one (phase 1, all benign), the latching
/// one (`latch`), and some after it (phase 2, queued with it; none may reach a server).
#[derive(Clone, Debug)]
pub(super) struct StrictPlan {
    pub plan: Plan,
    pub attempts: u32,
    pub with_stdio: bool,
    /// Index of the first command whose outcome latches.
    pub latch: usize,
    /// The category it latches, from its injected fault.
    pub category: &'static str,
}

fn benign_kind(rng: &mut StdRng, with_stdio: bool) -> Kind {
    let stdio = if with_stdio { 15 } else { 0 };
    match pick(rng, &[30, 10, 8, 8, stdio, 5, 5, 4, 4, 4, 4, 4]) {
        0 => Kind::Call {
            route: Route::Http,
            mcp: Mcp::Ok,
        },
        1 => Kind::Call {
            route: Route::Http,
            mcp: Mcp::Sse(rng.random_range(0..3)),
        },
        2 => Kind::Call {
            route: Route::Http,
            mcp: Mcp::Slow(rng.random_range(20..200)),
        },
        // A refusal with an HTTP 4xx: answered, not ambiguous.
        3 => Kind::Call {
            route: Route::Http,
            mcp: if rng.random_bool(0.6) {
                Mcp::Status([400, 404, 429][rng.random_range(0..3)], rng.random_bool(0.5))
            } else {
                Mcp::RpcError([200, 400, 500][rng.random_range(0..3)])
            },
        },
        4 => Kind::Call {
            route: Route::Stdio,
            mcp: if rng.random_bool(0.7) {
                Mcp::Ok
            } else {
                Mcp::Slow(rng.random_range(5..100))
            },
        },
        5 => Kind::Call {
            route: Route::Refused,
            mcp: Mcp::Ok,
        },
        6 => Kind::Notification,
        7 => Kind::SessionEnd(200),
        8 => Kind::Expired,
        9 => Kind::UnknownType,
        10 => Kind::Unroutable,
        _ => {
            if rng.random_bool(0.5) {
                Kind::Invalid
            } else {
                Kind::UnmatchedReply
            }
        }
    }
}

/// Whether a command's POSTs are free to fail in strict mode: nothing reached an MCP
/// server, so nothing latches (docs/strict-mode.md: a `not_sent` command never latches).
fn never_dispatched(kind: &Kind) -> bool {
    matches!(
        kind,
        Kind::Call {
            route: Route::Refused,
            ..
        } | Kind::Unroutable
            | Kind::Invalid
            | Kind::UnmatchedReply
    )
}

/// A POST sequence whose last attempt latches `category` (one of the `ack_*`).
fn latching_post(rng: &mut StdRng, attempts: u32, category: &str) -> Vec<Option<Post>> {
    // Earlier attempts: anything retryable; the settling one decides.
    let retry = |rng: &mut StdRng| match pick(rng, &[1, 1, 2]) {
        0 => Post::Hold,
        1 => Post::Close,
        _ => Post::Status(retryable(rng), false),
    };
    let last = match category {
        "ack_timeout" => Post::Hold,
        "ack_connection_lost" => Post::Close,
        "ack_retries_exhausted" => Post::Status(retryable(rng), rng.random_bool(0.2)),
        "ack_not_found" => Post::Status(404, false),
        "ack_rejected" => Post::Status(rejecting(rng), false),
        other => unreachable!("{other} is not an ack category"),
    };
    // A final status may come on any attempt; the others only on the last.
    let at = if matches!(category, "ack_not_found" | "ack_rejected") {
        rng.random_range(0..attempts as usize)
    } else {
        attempts as usize - 1
    };
    let mut seq: Vec<Option<Post>> = (0..at).map(|_| Some(retry(rng))).collect();
    seq.push(Some(last));
    seq
}

pub(super) fn strict_plan(seed: u64) -> StrictPlan {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_5071_c700_0000);
    let attempts = rng.random_range(2..=3);
    let with_stdio = rng.random_bool(0.35);
    let before = rng.random_range(0..=4);
    let after = rng.random_range(0..=3);
    let mut commands = Vec::new();
    // A failed notification never latches: any command may meet notification faults.
    let mut push = |rng: &mut StdRng, kind: Kind, post: Vec<Option<Post>>| {
        let index = commands.len();
        let marker = format!("t{seed}c{index}");
        let rpc_id = rpc_id(rng, index, &marker);
        let notify = maybe_notify(rng, &kind, attempts);
        commands.push(Cmd {
            index,
            marker,
            kind,
            rpc_id,
            post,
            notify,
        });
    };
    for _ in 0..before {
        let kind = benign_kind(&mut rng, with_stdio);
        let post = if never_dispatched(&kind) && rng.random_bool(0.5) {
            any_post(&mut rng, attempts)
        } else {
            benign_post(&mut rng, attempts)
        };
        push(&mut rng, kind, post);
    }
    let categories = [
        "ack_timeout",
        "ack_connection_lost",
        "ack_not_found",
        "ack_rejected",
        "ack_retries_exhausted",
        "deadline_expired",
        "stopped_before_ack",
        "downstream_ambiguous",
    ];
    let category = categories[pick(&mut rng, &[10, 10, 10, 10, 10, 10, 8, 16])];
    let stdio = with_stdio && rng.random_bool(0.4);
    let route = if stdio { Route::Stdio } else { Route::Http };
    let (mcp, post) = match category {
        // Generous: the deadline runs from receipt, and a loaded machine must still
        // dispatch it in time (else it expires unsent, and nothing latches).
        "deadline_expired" => (
            Mcp::Late {
                timeout_ms: 1500,
                sleep_ms: 5000,
            },
            Vec::new(),
        ),
        "stopped_before_ack" => (Mcp::Hang, Vec::new()),
        "downstream_ambiguous" if stdio => (
            if rng.random_bool(0.5) {
                Mcp::Die
            } else {
                Mcp::DiePartial
            },
            Vec::new(),
        ),
        "downstream_ambiguous" => (
            match pick(&mut rng, &[2, 2, 2, 2, 2, 1]) {
                0 => Mcp::Reset,
                1 => Mcp::Close,
                2 => Mcp::Cut(rng.random_range(0..2)),
                3 => Mcp::Truncated,
                5 => Mcp::WrongId,
                _ => Mcp::Status([408, 500, 502, 503, 504][rng.random_range(0..5)], rng.random_bool(0.5)),
            },
            any_post(&mut rng, attempts),
        ),
        ack => (
            if stdio {
                Mcp::Ok
            } else {
                [Mcp::Ok, Mcp::Sse(1), Mcp::Status(404, false)][rng.random_range(0..3)].clone()
            },
            latching_post(&mut rng, attempts, ack),
        ),
    };
    let latch = before;
    push(&mut rng, Kind::Call { route, mcp }, post);
    for _ in 0..after {
        let kind = if rng.random_bool(0.5) {
            benign_kind(&mut rng, with_stdio)
        } else {
            Kind::Call {
                route: Route::Http,
                mcp: Mcp::Reset,
            }
        };
        let post = any_post(&mut rng, attempts);
        push(&mut rng, kind, post);
    }
    // Poll faults on the first polls (never a hold: it costs the poll deadline).
    let mut polls = Vec::new();
    for nth in 1..=6 {
        if rng.random_bool(0.1) {
            polls.push((
                nth,
                match pick(&mut rng, &[3, 1, 2]) {
                    0 => PollFault::Status([429, 500, 503][rng.random_range(0..3)], false),
                    1 => PollFault::Close,
                    _ => PollFault::Delay(rng.random_range(20..200)),
                },
            ));
        }
    }
    assert_eq!(
        derived_category(&commands[latch], attempts),
        Some(category),
        "seed {seed}: the plan's latching fault does not imply its category"
    );
    StrictPlan {
        plan: Plan { seed, commands, polls },
        attempts,
        with_stdio,
        latch,
        category,
    }
}

// ---------------------------------------------------------------------------------------
// The simulator's fault script
// ---------------------------------------------------------------------------------------

fn action(out: &mut String, post: &Post) {
    match post {
        Post::Hold => out.push_str("action = \"hold\"\n"),
        Post::Close => out.push_str("action = \"close\"\n"),
        Post::Status(s, ra) => {
            let _ = writeln!(out, "status = {s}");
            if *ra {
                out.push_str("retry_after = \"1\"\n");
            }
        }
        Post::Delay(ms) => {
            let _ = writeln!(out, "delay = \"{ms}ms\"");
        }
    }
}

impl Plan {
    /// The fault script: one rule per faulted POST attempt, one entry per poll fault.
    pub(super) fn fault_script(&self) -> String {
        let mut out = String::new();
        for c in &self.commands {
            for (resp_type, posts) in [("terminal", &c.post), ("jsonrpc_notify", &c.notify)] {
                for (j, post) in posts.iter().enumerate() {
                    let Some(post) = post else { continue };
                    let _ = writeln!(
                        out,
                        "[[rule]]\nmatch = {{ order = {}, resp_type = \"{resp_type}\" }}\nattempts = [{}]",
                        c.order(),
                        j + 1
                    );
                    action(&mut out, post);
                }
            }
        }
        for (nth, fault) in &self.polls {
            let _ = writeln!(out, "[[poll]]\nnth = {nth}");
            match fault {
                PollFault::Status(s, ra) => action(&mut out, &Post::Status(*s, *ra)),
                PollFault::Close => action(&mut out, &Post::Close),
                PollFault::Hold => action(&mut out, &Post::Hold),
                PollFault::Delay(ms) => action(&mut out, &Post::Delay(*ms)),
                PollFault::Extra(k) => {
                    let _ = writeln!(out, "extra_commands = {k}");
                }
            }
        }
        out
    }
}
