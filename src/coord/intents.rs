//! [`EtcdIntents`]: the write-ahead intent of a strict replica on etcd, under
//! `<prefix>/intents/<request_id>` with no lease (it must outlive the replica that wrote
//! it). Written in one transaction conditioned on this replica's election key (its create
//! revision: the key of this term, not a successor's) and on the absence of the
//! cluster-wide latch; settled (deleted) under the first condition. Before any etcd
//! request the replica checks that it may admit at all (active, renew deadline not
//! passed, no cluster latch), so a standby or an overdue active never even asks.

use super::etcd::{CmpOp, Compare, Op, Txn};
use super::Coordinator;
use crate::strict::{Intent, IntentError, IntentFuture, IntentStore, Unsettled};
use crate::telemetry::{IntentOp, IntentOpResult};

/// The intent store of one replica on etcd.
pub struct EtcdIntents {
    coordinator: Coordinator,
}

impl EtcdIntents {
    pub(super) fn new(coordinator: Coordinator) -> Self {
        Self { coordinator }
    }

    async fn record_now(&self, intent: &Intent) -> Result<(), IntentError> {
        let c = &self.coordinator;
        let term = c.admitting_term().map_err(|why| refused(c, IntentOp::Record, why))?;
        let keys = &c.shared.keys;
        let key = keys.intent(&intent.request_id);
        let txn = Txn {
            compare: vec![
                Compare::CreateRevision(keys.leader.clone(), CmpOp::Equal, term.revision),
                Compare::CreateRevision(keys.latch.clone(), CmpOp::Equal, 0),
            ],
            success: vec![Op::Put {
                key,
                value: serde_json::to_vec(intent).expect("an intent serializes"),
                lease: None,
            }],
            failure: vec![],
        };
        match c.shared.etcd.txn(txn).await {
            Ok(r) if r.succeeded => {
                c.shared.metrics.intent_op(IntentOp::Record, IntentOpResult::Ok);
                c.lock().outstanding = Some(intent.request_id.clone());
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
                c.lock().outstanding = Some(intent.request_id.clone());
                Err(unavailable(c, IntentOp::Record, &e))
            }
        }
    }

    async fn settle_now(&self) -> Result<(), IntentError> {
        let c = &self.coordinator;
        let (outstanding, term) = {
            let mut state = c.lock();
            (state.outstanding.take(), state.active)
        };
        let Some(request_id) = outstanding else { return Ok(()) };
        let Some(term) = term else {
            return Err(refused(
                c,
                IntentOp::Settle,
                "this replica lost the coordination lease before the settle; the intent stays and the next active latches on it",
            ));
        };
        match c.shared.etcd.txn(settle_txn(c, &request_id, term.revision)).await {
            Ok(r) if r.succeeded => {
                c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Ok);
                Ok(())
            }
            Ok(_) => Err(refused(
                c,
                IntentOp::Settle,
                "etcd refused the settle: another replica holds the coordination lease now; the intent stays and it latches on it",
            )),
            Err(e) => {
                c.lock().settle_again = Some((request_id, term.revision));
                Err(unavailable(c, IntentOp::Settle, &e))
            }
        }
    }
}

/// Tries a settle etcd did not answer again, under the term it was recorded in (after a
/// renewal: etcd answers again). Refused means the term is over: the intent stays, and
/// whoever holds the lease latched or will latch on it.
pub(super) async fn settle_again(c: &Coordinator) {
    let Some((request_id, revision)) = c.lock().settle_again.take() else {
        return;
    };
    match c.shared.etcd.txn(settle_txn(c, &request_id, revision)).await {
        Ok(r) if r.succeeded => {
            c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Ok);
            tracing::info!(request_id = %request_id, "the write-ahead intent was settled on a later try");
        }
        Ok(_) => {
            c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Refused);
            tracing::error!(request_id = %request_id, "the write-ahead intent could not be settled: the term is over; the active latches on it");
        }
        Err(_) => {
            c.shared.metrics.intent_op(IntentOp::Settle, IntentOpResult::Failed);
            c.lock().settle_again = Some((request_id, revision));
        }
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

    /// Unsettled intents on etcd are read by the election, in the transaction that makes
    /// a replica the active: nothing is read at start.
    fn unsettled(&self) -> Unsettled {
        Unsettled::None
    }
}
