//! [`EtcdIntents`]: the write-ahead intent of a strict replica on etcd, under
//! `<prefix>/intents/<request_id>` with no lease (it must outlive the replica that wrote
//! it). Written in one transaction conditioned on this replica's election key (its create
//! revision: the key of this term, not a successor's) and on the absence of the
//! cluster-wide latch; settled (deleted) under the first condition. Before any etcd
//! request the replica checks that it may admit at all (active, renew deadline not
//! passed, no cluster latch), so a standby or an overdue active never even asks.
//!
//! One transaction per command: an acknowledged command's settle is not written on its
//! own at once. Its delete rides the next command's record transaction (same term, same
//! conditions, atomically with the new record), or, when no command follows within
//! [`IDLE_SETTLE`], the settle loop writes it alone. The recovery rules:
//! - a successor that finds an intent latches on it, whichever command it names: an
//!   acknowledged command's intent not yet deleted (its replica killed within
//!   `IDLE_SETTLE` of the acknowledgement, before a next record) latches exactly as a
//!   kill between the acknowledgement and an immediate settle always did;
//! - a record refused or unanswered leaves the pending delete to the settle loop, under
//!   the term it was recorded in (a delete is idempotent: one that did commit is
//!   harmless to repeat);
//! - a step-down waits until the pending delete is written, and a graceful stop writes
//!   it before it gives the lease back: a handover never leaves an acknowledged command's
//!   intent;
//! - a record of the same request id as the pending delete folds nothing: it overwrites
//!   that key, and its own settle removes it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::etcd::{CmpOp, Compare, Op, Txn};
use super::Coordinator;
use crate::strict::{Intent, IntentError, IntentFuture, IntentStore};
use crate::telemetry::{IntentOp, IntentOpResult};

/// The intent store of one replica on etcd.
pub(crate) struct EtcdIntents {
    coordinator: Coordinator,
}

impl EtcdIntents {
    pub(super) fn new(coordinator: Coordinator) -> Self {
        Self { coordinator }
    }

    async fn record_now(&self, intent: &Intent) -> Result<(), IntentError> {
        let c = &self.coordinator;
        let (term, _recording, folded) =
            Recording::begin(c, &intent.request_id).map_err(|why| refused(c, IntentOp::Record, why))?;
        let keys = &c.shared.keys;
        let mut success = vec![Op::Put {
            key: keys.intent(&intent.request_id),
            value: serde_json::to_vec(intent).expect("an intent serializes"),
            lease: None,
        }];
        if let Some((request_id, _)) = &folded {
            success.push(Op::Delete {
                key: keys.intent(request_id),
                prefix: false,
            });
        }
        let txn = Txn {
            compare: vec![
                Compare::CreateRevision(keys.leader.clone(), CmpOp::Equal, term.revision),
                Compare::CreateRevision(keys.latch.clone(), CmpOp::Equal, 0),
            ],
            success,
            failure: vec![],
        };
        let answer = c.shared.etcd.txn(txn).await;
        if !matches!(answer, Ok(ref r) if r.succeeded) {
            // The folded delete is the settle loop's again, under its own term.
            if let Some((request_id, revision)) = folded.clone() {
                c.lock().unsettled.insert(request_id, revision);
                c.shared.settle_wake.notify_one();
            }
        }
        match answer {
            Ok(r) if r.succeeded => {
                c.shared.metrics.intent_op(IntentOp::Record, IntentOpResult::Ok);
                if folded.is_some() {
                    c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Ok);
                }
                c.lock().outstanding = Some((intent.request_id.clone(), term.revision));
                Ok(())
            }
            Ok(_) => Err(refused(
                c,
                IntentOp::Record,
                "etcd refused the transaction: this replica no longer holds the coordination lease, or a cluster-wide latch is set",
            )),
            Err(e) => {
                // The transaction may have committed with its answer lost: the command is
                // not dispatched, and its settle removes the record if it exists.
                c.lock().outstanding = Some((intent.request_id.clone(), term.revision));
                Err(unavailable(c, IntentOp::Record, &e))
            }
        }
    }

    /// Settles the outstanding intent: its delete waits for the next record's
    /// transaction, or for the settle loop after [`IDLE_SETTLE`] (under the term it was
    /// recorded in, whether or not this replica's clock still counts itself the active:
    /// the transaction's condition is what proves no successor read it). A delete etcd
    /// does not confirm joins the unsettled set, retried while the term lasts.
    async fn settle_now(&self) -> Result<(), IntentError> {
        let c = &self.coordinator;
        let mut state = c.lock();
        let Some(settled) = state.outstanding.take() else {
            return Ok(());
        };
        if let Some((request_id, revision)) = state.pending_settle.replace(settled) {
            // Never two pending: the older one goes to the retried set.
            state.unsettled.insert(request_id, revision);
        }
        drop(state);
        c.shared.settle_wake.notify_one();
        Ok(())
    }
}

/// How long an acknowledged command's delete waits for a next record to ride before the
/// settle loop writes it alone: short enough that an idle active leaves nothing behind
/// for long, long enough that back-to-back commands need one transaction each.
pub(super) const IDLE_SETTLE: Duration = Duration::from_millis(50);

/// Writes the pending delete alone (no record took it within [`IDLE_SETTLE`]).
async fn settle_pending(c: &Coordinator) {
    let Some((request_id, revision)) = c.lock().pending_settle.take() else {
        return;
    };
    match c.shared.etcd.txn(settle_txn(c, &request_id, revision)).await {
        Ok(r) if r.succeeded => c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Ok),
        Ok(_) => {
            c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Refused);
            tracing::error!(request_id = %request_id, "the write-ahead intent of an acknowledged command could not be settled before its term ended; it stays in etcd and the next active latches on it");
        }
        Err(_) => {
            c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Failed);
            c.lock().unsettled.insert(request_id, revision);
            c.publish();
        }
    }
}

/// Moves the pending delete to the retried set (a stop or the end of the term is near).
/// A step-down waits until it is written.
pub(super) fn pending_to_unsettled(c: &Coordinator) {
    let mut state = c.lock();
    if let Some((request_id, revision)) = state.pending_settle.take() {
        state.unsettled.insert(request_id, revision);
    }
}

/// An intent record in flight: counted from the admission check (under the same lock)
/// until etcd answers, so that a step-down never races it.
struct Recording<'a>(&'a Coordinator);

/// A pending delete to fold into a record: its request id and term.
type Folded = Option<(String, i64)>;

impl<'a> Recording<'a> {
    /// The term, the recording guard, and the pending delete this record folds in (one
    /// of this term; an older term's goes to the retried set).
    fn begin(c: &'a Coordinator, request_id: &str) -> Result<(super::Term, Self, Folded), &'static str> {
        let mut state = c.lock();
        let term = c.admitting_term_of(&state)?;
        state.recording += 1;
        let folded = match state.pending_settle.take() {
            // The same request id again: this record overwrites that key (etcd refuses a
            // transaction that writes and deletes one key), and its own settle removes it.
            Some((pending, _)) if pending == request_id => None,
            Some((request_id, revision)) if revision == term.revision => Some((request_id, revision)),
            Some((request_id, revision)) => {
                state.unsettled.insert(request_id, revision);
                None
            }
            None => None,
        };
        Ok((term, Self(c), folded))
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.recording = state.recording.saturating_sub(1);
    }
}

/// The first retry of an unconfirmed settle, doubled after each failed round up to the
/// renewal interval.
const SETTLE_RETRY_FIRST: Duration = Duration::from_millis(100);

/// Retries the unsettled set until `stop`: at once when woken (a new failure, a renewal),
/// then with backoff while any remain.
pub(super) async fn settle_loop(c: &Coordinator, stop: &CancellationToken) {
    let mut delay = SETTLE_RETRY_FIRST;
    loop {
        let (retry, pending) = {
            let state = c.lock();
            (!state.unsettled.is_empty(), state.pending_settle.is_some())
        };
        let wait = match (retry, pending) {
            (_, true) => IDLE_SETTLE.min(if retry { delay } else { Duration::MAX }),
            (true, false) => delay,
            (false, false) => Duration::MAX,
        };
        let slept = tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => return,
            // cancel-safe: a lost wakeup is covered by the backoff.
            () = c.shared.settle_wake.notified() => false,
            // cancel-safe: a sleep.
            () = sleep_at_most(wait) => true,
        };
        // A pending delete is written alone only once it waited IDLE_SETTLE for a record.
        if pending && slept {
            settle_pending(c).await;
        }
        if c.lock().unsettled.is_empty() {
            continue;
        }
        delay = match settle_unsettled(c).await {
            Round::Done => SETTLE_RETRY_FIRST,
            Round::Failed => (delay * 2).min(c.renew_interval()),
        };
    }
}

async fn sleep_at_most(wait: Duration) {
    if wait == Duration::MAX {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(wait).await;
}

/// How a round of settle retries ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Round {
    /// Every unsettled intent was settled, or given up as its term is over.
    Done,
    /// etcd did not answer; the rest wait for the next round.
    Failed,
}

/// Tries every settle etcd did not confirm, under the term each was recorded in, and
/// stops at the first that etcd does not answer. Refused means that term is over: the
/// intent stays, whoever holds the lease latches or will latch on it, and that is logged
/// once with its request id.
pub(super) async fn settle_unsettled(c: &Coordinator) -> Round {
    let pending: Vec<(String, i64)> = c.lock().unsettled.iter().map(|(r, v)| (r.clone(), *v)).collect();
    let mut round = Round::Done;
    for (request_id, revision) in pending {
        match c.shared.etcd.txn(settle_txn(c, &request_id, revision)).await {
            Ok(r) if r.succeeded => {
                c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Ok);
                tracing::info!(request_id = %request_id, "the write-ahead intent was settled on a later try");
            }
            Ok(_) => {
                c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Refused);
                tracing::error!(request_id = %request_id, "the write-ahead intent of an acknowledged command could not be settled before its term ended; it stays in etcd and the next active latches on it");
            }
            Err(_) => {
                c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Failed);
                round = Round::Failed;
                break;
            }
        }
        c.lock().unsettled.remove(&request_id);
    }
    c.publish();
    round
}

/// The term is over for certain (the lease is gone or was given up): what is still
/// unsettled stays in etcd, logged once each.
pub(super) fn term_ended(c: &Coordinator) {
    pending_to_unsettled(c);
    let left = std::mem::take(&mut c.lock().unsettled);
    for request_id in left.keys() {
        tracing::error!(request_id = %request_id, "the write-ahead intent of an acknowledged command could not be settled before this replica's term ended; it stays in etcd and the next active latches on it");
    }
}

/// Deletes `request_id`'s intent if the election key is still the one of the term
/// (`revision`) it was recorded in.
fn settle_txn(c: &Coordinator, request_id: &str, revision: i64) -> Txn {
    let keys = &c.shared.keys;
    Txn {
        compare: vec![Compare::CreateRevision(keys.leader.clone(), CmpOp::Equal, revision)],
        success: vec![Op::Delete {
            key: keys.intent(request_id),
            prefix: false,
        }],
        failure: vec![],
    }
}

fn refused(c: &Coordinator, op: IntentOp, why: &str) -> IntentError {
    c.shared.metrics.intent_op(op, IntentOpResult::Refused);
    IntentError::Refused { reason: why.to_owned() }
}

fn unavailable(c: &Coordinator, op: IntentOp, e: &super::etcd::EtcdError) -> IntentError {
    c.shared.metrics.intent_op(op, IntentOpResult::Failed);
    IntentError::Unavailable { reason: e.to_string() }
}

impl IntentStore for EtcdIntents {
    fn record<'a>(&'a self, intent: &'a Intent) -> IntentFuture<'a, Result<(), IntentError>> {
        Box::pin(self.record_now(intent))
    }

    fn settle(&self) -> IntentFuture<'_, Result<(), IntentError>> {
        Box::pin(self.settle_now())
    }

    fn may_admit(&self) -> bool {
        self.coordinator.may_admit()
    }
}
