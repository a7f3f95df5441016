//! What a child prints: its stdout lines routed to the requests in flight (through its
//! id map), and its stderr lines logged.
//!
//! Invariants:
//! - a response goes only to the live request with its pipe id; one for a retired
//!   request is discarded and counted late, one with an unknown id discarded;
//! - a `notifications/progress` goes only to the live request whose pipe token it
//!   carries, with that caller's own token put back;
//! - a server request that needs a client capability goes to the oldest caller in flight
//!   that declared it (on a session the gateway owns), else the gateway refuses it:
//!   the child never waits on it; any other message goes to the oldest request in flight;
//! - a full notification sink holds up the reader (backpressure) until the request
//!   ends; a line that is not JSON-RPC is counted and skipped;
//! - stdout lines are logged by length only, stderr lines only redacted, truncated and
//!   within the log budget ([`crate::downstream::redact`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::process::{ChildStderr, ChildStdout};
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

use super::{Child, Waiter};
use crate::downstream::redact::{self, LogBudget};
use crate::downstream::stdio::line::{self, Ask, Line, LineReader, RawLine};
use crate::downstream::stdio::pending::Answer;
use crate::downstream::stdio::rewrite;
use crate::downstream::stdio::session::Declared;
use crate::downstream::stdio::Shared;
use crate::downstream::{Notification, NotifySink};
use crate::supervisor::TaskEnd;

/// Longest stdout line accepted as a message; longer ones are dropped as invalid.
pub(super) const MAX_MESSAGE_LINE: usize = 16 * 1024 * 1024;

/// Routes each stdout line: responses to the request with their pipe id, progress to
/// the request with its token, other messages to the oldest request in flight, garbage
/// counted and skipped.
pub(super) async fn read_stdout(shared: Arc<Shared>, child: Arc<Child>, stdout: ChildStdout) -> TaskEnd {
    let mut reader = LineReader::new(stdout, MAX_MESSAGE_LINE, false);
    loop {
        match reader.next_line().await {
            Ok(Some(line)) => route_line(&shared, &child, line).await,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(channel = %shared.channel, generation = child.generation, error = %e, "reading the stdio child's stdout failed");
                break;
            }
        }
    }
    drop(reader);
    child.stdout_eof();
    // A child that closed its stdout can never answer again.
    if timeout(shared.settings.stop_grace, child.exited.cancelled())
        .await
        .is_err()
        && !child.killed.is_cancelled()
    {
        tracing::warn!(channel = %shared.channel, generation = child.generation, "stdio child closed its stdout but kept running: killing its group");
        child.kill_group();
    }
    TaskEnd::Finished
}

/// Where a message the child printed goes.
enum Target {
    /// To this request's notification sink, as is or with its caller's token restored.
    Request {
        notes: NotifySink,
        done: CancellationToken,
        raw: Box<RawValue>,
    },
    /// Nowhere, for this reason (logged at debug).
    Dropped(&'static str),
}

/// Routes one stdout line (see [`read_stdout`]).
async fn route_line(shared: &Arc<Shared>, child: &Arc<Child>, line: RawLine) {
    if line.overflow {
        shared.invalid_line(child, line.len);
        return;
    }
    let len = line.len;
    match line::classify(line.bytes) {
        Line::Blank => {}
        Line::Invalid => shared.invalid_line(child, len),
        Line::Response { id, raw } => {
            let pipe = id.as_ref().and_then(|span| rewrite::plain_u64(raw.get(), span));
            let answer = match pipe {
                Some(pipe) => child.route().answer(pipe),
                None => Answer::Unknown,
            };
            match answer {
                Answer::To { waiter, origin } => {
                    let span = id.expect("a routed answer has an id");
                    if waiter.tx.send((raw, span, origin.id)).is_err() {
                        tracing::debug!(channel = %shared.channel, "response for a call that was dropped; discarded");
                        shared.metrics.stdio_late_response(&shared.channel);
                    }
                }
                Answer::Late => shared.response_discarded(child, true),
                Answer::Unknown => shared.response_discarded(child, false),
            }
        }
        Line::Message { raw, progress, ask } => {
            if !progress && ask.is_none() {
                shared.relay_to_listeners(raw.get());
            }
            let target = if progress {
                progress_target(child, &raw)
            } else {
                message_target(shared, child, raw, ask)
            };
            match target {
                Target::Request { notes, done, raw } => hand_over(shared, notes, &done, raw).await,
                Target::Dropped(why) => {
                    tracing::debug!(channel = %shared.channel, generation = child.generation, reason = why, "message from the stdio child dropped");
                }
            }
        }
    }
}

/// Where a message not tied to a request by a progress token goes. A server request that
/// needs a client capability goes to the oldest caller in flight that declared it (on a
/// session the gateway owns); with none, the gateway refuses it (never a hang). Anything
/// else goes to the oldest request in flight.
fn message_target(shared: &Arc<Shared>, child: &Arc<Child>, raw: Box<RawValue>, ask: Option<Ask>) -> Target {
    let to = |w: &Waiter, raw| Target::Request {
        notes: w.notes.clone(),
        done: w.done.clone(),
        raw,
    };
    let route = child.route();
    match ask.and_then(|a| Some((a.need?, a.id))).filter(|_| child.owned()) {
        Some((need, id)) => match route.oldest_where(|o| Declared::of_session_id(o.caller.as_deref()).allows(need)) {
            Some(w) => to(w, raw),
            None => {
                drop(route);
                shared.refuse_ask(child, &raw.get()[id], need);
                Target::Dropped("a server request no caller in flight can answer (refused)")
            }
        },
        None => match route.oldest() {
            Some(w) => to(w, raw),
            None => Target::Dropped("outside any request"),
        },
    }
}

/// Hands a message to its request's sink, in order; waits while the sink is full (the
/// backpressure), unless the request ends meanwhile.
async fn hand_over(shared: &Shared, notes: NotifySink, done: &CancellationToken, raw: Box<RawValue>) {
    let note = Notification {
        resp_json: raw,
        resp_headers: BTreeMap::new(),
    };
    // cancel-safe: `try_send` is synchronous; the fallback below is the wait.
    let note = match notes.try_send(note) {
        Ok(()) => return,
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
            tracing::debug!(channel = %shared.channel, "notification sink closed; dropped");
            return;
        }
        Err(tokio::sync::mpsc::error::TrySendError::Full(note)) => note,
    };
    tokio::select! {
        biased;
        // cancel-safe: waiting on a token.
        () = done.cancelled() => {
            tracing::debug!(channel = %shared.channel, "request finished before its notification could be handed over; dropped");
        }
        // cancel-safe: `Sender::send` only enqueues when it resolves.
        sent = notes.send(note) => {
            if sent.is_err() {
                tracing::debug!(channel = %shared.channel, "notification sink closed; dropped");
            }
        }
    }
}

/// A `notifications/progress` goes to the live request whose pipe token it carries, with
/// that caller's own token put back; any other token belongs to nobody.
fn progress_target(child: &Child, raw: &RawValue) -> Target {
    let Some(span) = rewrite::progress_token_span(raw.get()) else {
        return Target::Dropped("progress without a token");
    };
    let Some(token) = rewrite::plain_u64(raw.get(), &span) else {
        return Target::Dropped("progress with a token the gateway never issued");
    };
    let route = child.route();
    let Some((original, waiter)) = route.progress(token) else {
        return Target::Dropped("progress for no request in flight");
    };
    let restored = rewrite::splice(raw.get(), &mut [(span, original)]);
    let (notes, done) = (waiter.notes.clone(), waiter.done.clone());
    drop(route);
    match RawValue::from_string(restored) {
        Ok(raw) => Target::Request { notes, done, raw },
        Err(_) => Target::Dropped("progress whose token could not be restored"),
    }
}

/// Logs stderr line by line, redacted, truncated and rate-limited.
pub(super) async fn log_stderr(shared: Arc<Shared>, generation: u64, stderr: ChildStderr) -> TaskEnd {
    let mut reader = LineReader::new(stderr, redact::MAX_READ_LINE, true);
    let mut budget = LogBudget::new(Instant::now());
    while let Ok(Some(line)) = reader.next_line().await {
        let Some(suppressed) = budget.admit(Instant::now()) else {
            continue;
        };
        if suppressed > 0 {
            tracing::info!(target: "tunnelgate::stdio_child", channel = %shared.channel, generation, suppressed, "stderr lines over the log budget were skipped");
        }
        let mut text = redact::redact_line(&String::from_utf8_lossy(&line.bytes));
        if line.overflow && !text.ends_with(redact::TRUNCATED) {
            text.push_str(redact::TRUNCATED);
        }
        tracing::info!(target: "tunnelgate::stdio_child", channel = %shared.channel, generation, line = %text);
    }
    TaskEnd::Finished
}

impl Shared {
    /// A stdout line that is not a JSON-RPC message (or is too long): counted, skipped.
    fn invalid_line(&self, child: &Child, len: usize) {
        self.metrics.stdio_invalid_line();
        tracing::warn!(channel = %self.channel, generation = child.generation, len, "stdio child printed a line on stdout that is not a JSON-RPC message; skipped");
    }

    /// A response matched no request in flight: `late` when its request was retired
    /// (past its deadline), otherwise its id is unknown.
    fn response_discarded(&self, child: &Child, late: bool) {
        self.discarded_responses.fetch_add(1, Ordering::Relaxed);
        if late {
            self.metrics.stdio_late_response(&self.channel);
            tracing::warn!(channel = %self.channel, generation = child.generation, "stdio child answered a request already retired after its deadline; discarded");
        } else {
            tracing::warn!(channel = %self.channel, generation = child.generation, "stdio child sent a response matching no request in flight or recently retired (an unknown id); discarded");
        }
    }
}
