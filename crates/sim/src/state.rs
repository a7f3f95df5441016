//! The simulator's shared state: the command queue, every pending request, the record.
//!
//! Invariants: one `std::sync::Mutex` guards everything and is never held across an
//! `.await`; a request completes at most once (its first accepted final response);
//! completed requests are kept so a repeated POST gets `404`, up to a capacity: the
//! oldest completed are forgotten first, and a POST for one of them still gets `404`
//! (it is unknown). The record is bounded the same way (see `record`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::command::{Issued, NewCommand, Queued};
use super::fault::{FaultScript, FeedCommand, FeedEntry};
use super::record::{CommandRecord, Journal, LookupRecord, PollRecord, Record, ResponseRecord};
use crate::protocol::RespType;

/// The parts of the configuration handlers need, plus the mutable state.
pub(crate) struct Shared {
    pub(crate) tunnel_id: String,
    pub(crate) api_key: String,
    pub(crate) max_poll_wait: Duration,
    pub(crate) ingress_timeout: Duration,
    pub(crate) faults: FaultScript,
    /// Response POST bodies above this many bytes get `413 request_body_too_large`.
    pub(crate) max_response_body: usize,
    /// Response POSTs may carry `resp_timing`.
    pub(crate) accept_resp_timing: bool,
    inner: Mutex<Inner>,
    queued: Notify,
    recorded: Notify,
}

struct Inner {
    queue: VecDeque<(u64, Queued)>,
    /// Requests that may be answered, and completed ones (for `404`).
    pending: HashMap<String, Pending>,
    /// Completed request ids, oldest first; at most `completed_capacity`.
    completed: VecDeque<String>,
    completed_capacity: usize,
    next_order: u64,
    waiting_feeds: Vec<FeedEntry>,
    record: Journal,
    polls_seen: u64,
    faults_applied: u64,
    issued: u64,
    completed_total: u64,
}

/// How much the simulator keeps (see [`SimConfig`](super::SimConfig)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Capacity {
    pub(crate) record: usize,
    pub(crate) completed: usize,
    /// The largest response POST body accepted, in bytes.
    pub(crate) response_body: usize,
    /// Whether response POSTs may carry `resp_timing`.
    pub(crate) resp_timing: bool,
}

struct Pending {
    order: u64,
    shard_token: Option<String>,
    method: Option<String>,
    tool: Option<String>,
    completed: bool,
    attempts: HashMap<String, u32>,
    waiter: Option<mpsc::UnboundedSender<GatewayReply>>,
}

/// An accepted response POST, as the MCP ingress relays it to its client.
#[derive(Clone, Debug)]
pub(crate) struct GatewayReply {
    pub(crate) resp_type: RespType,
    pub(crate) resp_code: i64,
    /// `resp_json` exactly as posted; `None` when absent or null.
    pub(crate) resp_json: Option<Bytes>,
    pub(crate) resp_headers: Vec<(String, Vec<String>)>,
}

/// What is known about the command a response POST names.
#[derive(Clone, Debug, Default)]
pub(crate) struct PostFacts {
    pub(crate) order: Option<u64>,
    pub(crate) method: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) attempt: u32,
}

/// Why an otherwise valid response POST is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Unknown, or already completed (`404 pending_request_not_found`).
    NotPending,
    /// `X-Tunnel-Shard-Token` is not the command's token.
    ShardTokenMismatch,
}

/// Counters for the CLI summary (whole run, whatever the record dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) issued: u64,
    pub(crate) responses: u64,
    pub(crate) completed: u64,
    pub(crate) faults_applied: u64,
}

impl Shared {
    pub(crate) fn new(
        tunnel_id: String,
        api_key: String,
        max_poll_wait: Duration,
        ingress_timeout: Duration,
        faults: FaultScript,
        capacity: Capacity,
    ) -> Self {
        let (now, later): (Vec<_>, Vec<_>) = faults.feed.iter().cloned().partition(|f| f.after_order.is_none());
        let shared = Self {
            tunnel_id,
            api_key,
            max_poll_wait,
            ingress_timeout,
            faults,
            max_response_body: capacity.response_body,
            accept_resp_timing: capacity.resp_timing,
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                pending: HashMap::new(),
                completed: VecDeque::new(),
                completed_capacity: capacity.completed.max(1),
                next_order: 0,
                waiting_feeds: later,
                record: Journal::new(capacity.record),
                polls_seen: 0,
                faults_applied: 0,
                issued: 0,
                completed_total: 0,
            }),
            queued: Notify::new(),
            recorded: Notify::new(),
        };
        {
            let mut inner = shared.lock();
            for feed in now {
                inner.push_feed(feed.command);
            }
        }
        shared
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a command; `waiter` receives every accepted response POST for it.
    pub(crate) fn enqueue(&self, command: NewCommand, waiter: Option<mpsc::UnboundedSender<GatewayReply>>) -> String {
        let issued = Issued::new(command);
        let request_id = issued.request_id.clone();
        self.lock().push(Queued::Command(Box::new(issued)), waiter);
        self.queued.notify_waiters();
        self.recorded.notify_waiters();
        request_id
    }

    pub(crate) fn enqueue_raw(&self, raw: serde_json::Value) {
        self.lock().push(Queued::Raw(raw), None);
        self.queued.notify_waiters();
        self.recorded.notify_waiters();
    }

    /// Numbers a poll request (1-based, every poll received).
    pub(crate) fn next_poll(&self) -> u64 {
        let mut inner = self.lock();
        inner.polls_seen += 1;
        inner.polls_seen
    }

    /// Takes queued commands, waiting up to `wait` for the first one to arrive. With
    /// `channels` (a poll filter), only commands of those channels are taken, in queue
    /// order; the others stay queued for other pollers.
    ///
    /// # Cancel safety
    /// Cancel-safe: commands are taken in one synchronous step after the last await.
    pub(crate) async fn wait_for_commands(
        &self,
        max: Option<usize>,
        wait: Duration,
        channels: &[String],
    ) -> Vec<Queued> {
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.queued.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = self.lock().take(max, channels);
            if !taken.is_empty() {
                self.recorded.notify_waiters();
                return taken;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Looks up the command a POST names and counts the attempt. The first POST for a
    /// command releases the feeds waiting on its order.
    pub(crate) fn observe_post(&self, request_id: Option<&str>, resp_type: &str) -> PostFacts {
        let mut inner = self.lock();
        let Some(p) = request_id.and_then(|id| inner.pending.get_mut(id)) else {
            return PostFacts {
                attempt: 1,
                ..PostFacts::default()
            };
        };
        let first_post = p.attempts.is_empty();
        let attempt = p.attempts.entry(resp_type.to_owned()).or_insert(0);
        *attempt += 1;
        let facts = PostFacts {
            order: Some(p.order),
            method: p.method.clone(),
            tool: p.tool.clone(),
            attempt: *attempt,
        };
        if first_post {
            let order = p.order;
            let (ready, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.waiting_feeds)
                .into_iter()
                .partition(|f| f.after_order == Some(order));
            inner.waiting_feeds = rest;
            let fed = !ready.is_empty();
            for feed in ready {
                inner.push_feed(feed.command);
            }
            drop(inner);
            if fed {
                self.queued.notify_waiters();
            }
        }
        facts
    }

    /// Accepts a valid response POST: a final type completes the request. Returns whether
    /// it completed. The ingress waiting on the request, if any, receives `reply`.
    pub(crate) fn accept(&self, request_id: &str, shard_token: &str, reply: GatewayReply) -> Result<bool, Refusal> {
        let mut inner = self.lock();
        let p = inner.pending.get_mut(request_id).ok_or(Refusal::NotPending)?;
        if p.shard_token.as_deref() != Some(shard_token) {
            return Err(Refusal::ShardTokenMismatch);
        }
        if p.completed {
            return Err(Refusal::NotPending);
        }
        let completes = reply.resp_type.is_terminal();
        let waiter = if completes {
            p.completed = true;
            p.waiter.take()
        } else {
            p.waiter.clone()
        };
        if completes {
            inner.completed_total += 1;
            inner.remember_completed(request_id.to_owned());
        }
        drop(inner);
        if let Some(w) = waiter {
            // The ingress client may have gone away; the POST is accepted regardless.
            let _ = w.send(reply);
        }
        Ok(completes)
    }

    /// Poll requests received so far, finished or not.
    #[cfg(test)]
    pub(crate) fn polls_seen(&self) -> u64 {
        self.lock().polls_seen
    }

    pub(crate) fn fault_applied(&self) {
        self.lock().faults_applied += 1;
    }

    /// Records a poll on arrival; returns its index for [`Shared::update_poll`].
    pub(crate) fn record_poll(&self, poll: PollRecord) -> u64 {
        let idx = self.lock().record.polls.push(poll);
        self.recorded.notify_waiters();
        idx
    }

    /// Updates a recorded poll, unless the record has dropped it since.
    pub(crate) fn update_poll(&self, idx: u64, f: impl FnOnce(&mut PollRecord)) {
        if let Some(p) = self.lock().record.polls.get_mut(idx) {
            f(p);
        }
        self.recorded.notify_waiters();
    }

    /// Records a response POST once its body is read (or refused unread); returns its
    /// index.
    pub(crate) fn record_response(&self, response: ResponseRecord) -> u64 {
        let idx = self.lock().record.responses.push(response);
        self.recorded.notify_waiters();
        idx
    }

    /// Updates a recorded response POST, unless the record has dropped it since.
    pub(crate) fn update_response(&self, idx: u64, f: impl FnOnce(&mut ResponseRecord)) {
        if let Some(r) = self.lock().record.responses.get_mut(idx) {
            f(r);
        }
        self.recorded.notify_waiters();
    }

    /// Records a tunnel metadata request, already answered.
    pub(crate) fn record_lookup(&self, lookup: LookupRecord) {
        self.lock().record.lookups.push(lookup);
        self.recorded.notify_waiters();
    }

    pub(crate) fn record(&self) -> Record {
        self.lock().record.snapshot()
    }

    /// Requests kept for answering or for `404` (completed ones included).
    #[cfg(test)]
    pub(crate) fn requests_kept(&self) -> usize {
        self.lock().pending.len()
    }

    /// Waits until `pred` holds on the record, up to `timeout`.
    pub(crate) async fn wait_record(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Result<Record, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.recorded.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let record = self.record();
            if pred(&record) {
                return Ok(record);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let r = self.record();
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what} ({} polls, {} responses, {} commands queued)",
                    r.polls.len(),
                    r.responses.len(),
                    r.commands.len()
                ));
            }
        }
    }

    pub(crate) fn totals(&self) -> Totals {
        let inner = self.lock();
        Totals {
            issued: inner.issued,
            responses: inner.record.responses.total(),
            completed: inner.completed_total,
            faults_applied: inner.faults_applied,
        }
    }
}

impl Inner {
    fn push(&mut self, queued: Queued, waiter: Option<mpsc::UnboundedSender<GatewayReply>>) {
        self.next_order += 1;
        let order = self.next_order;
        let facts = queued.facts();
        if let Some(id) = &facts.request_id {
            self.pending.entry(id.clone()).or_insert_with(|| Pending {
                order,
                shard_token: facts.shard_token.clone(),
                method: facts.method.clone(),
                tool: facts.tool.clone(),
                completed: false,
                attempts: HashMap::new(),
                waiter,
            });
        }
        self.record.commands.push(CommandRecord {
            request_id: facts.request_id,
            method: facts.method,
            issued: false,
        });
        self.queue.push_back((order, queued));
    }

    fn push_feed(&mut self, command: FeedCommand) {
        match command {
            FeedCommand::Raw(v) => self.push(Queued::Raw(v), None),
            FeedCommand::Built(c) => self.push(Queued::Command(Box::new(Issued::new(c))), None),
        }
    }

    /// Takes up to `max` queued commands, oldest first; with `channels`, only theirs.
    fn take(&mut self, max: Option<usize>, channels: &[String]) -> Vec<Queued> {
        let max = max.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.queue.len() && out.len() < max {
            let channel = self.queue[i].1.channel();
            if !channels.is_empty() && !channels.iter().any(|c| c == channel) {
                i += 1;
                continue;
            }
            let (order, queued) = self.queue.remove(i).expect("the index is within the queue");
            // One command record per order, pushed in order: its index is `order - 1`.
            if let Some(c) = self.record.commands.get_mut(order - 1) {
                c.issued = true;
            }
            self.issued += 1;
            out.push(queued);
        }
        out
    }

    /// Keeps `request_id` answerable with `404`, forgetting the oldest completed request
    /// beyond the capacity.
    fn remember_completed(&mut self, request_id: String) {
        if self.completed.len() == self.completed_capacity {
            if let Some(oldest) = self.completed.pop_front() {
                self.pending.remove(&oldest);
            }
        }
        self.completed.push_back(request_id);
    }
}
