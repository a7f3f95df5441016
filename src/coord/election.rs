//! The election: every replica campaigns for `<prefix>/leader` with a lease of
//! `lease_ttl`; the holder renews it every third of the TTL. One loop per replica, one
//! step per renewal interval:
//!
//! - standby (or unreachable): keep its own lease alive (grant one when it has none),
//!   then one transaction: *if the leader key does not exist, put it with this replica's
//!   id under its lease, and read every intent and the latch; else read the leader key*
//!   (a latch read there is taken before the term may admit anything);
//! - active: renew the lease. A renewal etcd answers "lease gone" ends the term at once;
//!   one that fails leaves the term until the renew deadline, after which nothing is
//!   admitted and the next step campaigns again. A campaign that finds the leader key
//!   still under this replica's own lease takes the term back: the lease never lapsed,
//!   so no other replica can have acted meanwhile.
//!
//! A new term that reads an unsettled intent latches `interrupted_before_ack` (the intent's
//! command may have reached an MCP server under the previous holder, and its
//! acknowledgement is unknown), publishes the cluster latch, and only then removes the
//! intents, so a crash in between latches again.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::etcd::{CmpOp, Compare, EtcdError, KeyValue, Op, Txn};
use super::{Coordinator, Term};
use crate::strict::{CommandRef, FatalCategory, Intent};
use crate::telemetry::RenewalResult;

/// Runs the election until `stop`.
pub(super) async fn run(c: &Coordinator, stop: &CancellationToken) {
    loop {
        let active = c.lock().active.is_some();
        if active {
            renew(c).await;
            super::reach::consider_step_down(c).await;
        } else if super::reach::holding_off(c) {
            observe(c).await;
        } else {
            campaign(c).await;
        }
        c.publish();
        tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => return,
            () = tokio::time::sleep(c.renew_interval()) => {}
        }
    }
}

/// On a stop: tries the unsettled intents once more, then gives the lease back, so that a
/// standby takes over at the next step instead of after the TTL. Best effort, each
/// request bounded by the request timeout.
pub(super) async fn resign(c: &Coordinator) {
    super::intents::pending_to_unsettled(c);
    if !c.lock().unsettled.is_empty() {
        super::intents::settle_unsettled(c).await;
    }
    super::intents::term_ended(c);
    let lease = {
        let mut state = c.lock();
        state.active = None;
        state.lease.take()
    };
    c.publish();
    if let Some(lease) = lease {
        if let Err(e) = c.shared.etcd.revoke(lease).await {
            tracing::warn!(error = %e, "could not give the coordination lease back; a standby takes over when it expires");
        }
    }
}

async fn renew(c: &Coordinator) {
    let Some(lease) = c.lock().lease else {
        c.lock().active = None;
        return;
    };
    let sent = Instant::now();
    match c.shared.etcd.keep_alive(lease).await {
        Ok(Some(_)) => {
            c.shared.metrics.lease_renewed(RenewalResult::Ok);
            {
                let mut state = c.lock();
                state.reachable = true;
                if let Some(term) = state.active.as_mut() {
                    term.renewed_at = sent;
                }
            }
            c.shared.settle_wake.notify_one();
        }
        Ok(None) => {
            c.shared.metrics.lease_renewed(RenewalResult::Failed);
            tracing::warn!("the coordination lease expired: this replica is no longer the active");
            {
                let mut state = c.lock();
                state.active = None;
                state.lease = None;
                state.holder = None;
            }
            super::intents::term_ended(c);
        }
        Err(e) => {
            c.shared.metrics.lease_renewed(RenewalResult::Failed);
            let overdue = {
                let mut state = c.lock();
                state.reachable = false;
                let overdue = state
                    .active
                    .is_some_and(|t| t.renewed_at.elapsed() >= c.renew_deadline());
                if overdue {
                    state.active = None;
                }
                overdue
            };
            if overdue {
                tracing::error!(error = %e, "the coordination lease could not be renewed before the renew deadline: admitting nothing until it is");
            } else {
                tracing::warn!(error = %e, "a coordination lease renewal failed; the next one is due in a third of the TTL");
            }
        }
    }
}

async fn campaign(c: &Coordinator) {
    match try_campaign(c).await {
        Ok(()) => {
            let mut state = c.lock();
            state.reachable = true;
            state.told_unreachable = false;
        }
        Err(e) => {
            let tell = {
                let mut state = c.lock();
                state.reachable = false;
                !std::mem::replace(&mut state.told_unreachable, true)
            };
            if tell {
                tracing::warn!(error = %e, "etcd cannot be reached: this replica neither polls nor dispatches until it can");
            }
        }
    }
}

async fn try_campaign(c: &Coordinator) -> Result<(), EtcdError> {
    let lease = own_lease(c).await?;
    let sent = Instant::now();
    let keys = &c.shared.keys;
    let txn = Txn {
        compare: vec![Compare::CreateRevision(keys.leader.clone(), CmpOp::Equal, 0)],
        success: vec![
            Op::Put {
                key: keys.leader.clone(),
                value: c.shared.instance_id.as_bytes().to_vec(),
                lease: Some(lease),
            },
            Op::Range {
                key: keys.intents.clone(),
                prefix: true,
            },
            // Read in the same transaction, so that a new term never opens the poll gate
            // before the watch has seen a latch set meanwhile.
            Op::Range {
                key: keys.latch.clone(),
                prefix: false,
            },
        ],
        failure: vec![Op::Range {
            key: keys.leader.clone(),
            prefix: false,
        }],
    };
    let response = c.shared.etcd.txn(txn).await?;
    if response.succeeded {
        let intents = response.ranges.first().cloned().unwrap_or_default();
        if let Some(latch) = response.ranges.get(1).and_then(|r| r.first()) {
            super::latch::known(c, latch);
        }
        took_over(
            c,
            Term {
                revision: response.revision,
                started_at: sent,
                renewed_at: sent,
            },
            &intents,
        )
        .await;
        return Ok(());
    }
    let holder = response.ranges.first().and_then(|r| r.first()).cloned();
    match holder {
        // Still this replica's key under its living lease: the term goes on.
        Some(kv) if kv.lease == lease && kv.value == c.shared.instance_id.as_bytes() => {
            let mut state = c.lock();
            state.active = Some(Term {
                revision: kv.create_revision,
                started_at: sent,
                renewed_at: sent,
            });
            state.holder = Some(c.shared.instance_id.clone());
            tracing::info!("the coordination lease held through a renewal gap: active again");
        }
        Some(kv) => {
            c.lock().holder = Some(String::from_utf8_lossy(&kv.value).into_owned());
            // Another replica's term: whatever this one left unsettled is not its own to
            // settle any more.
            super::intents::term_ended(c);
        }
        // Deleted between the compare and the read: the next step campaigns again.
        None => c.lock().holder = None,
    }
    Ok(())
}

/// While holding off after a step-down: keeps this replica's lease alive and reads the
/// holder, but never puts the leader key.
async fn observe(c: &Coordinator) {
    let read = async {
        own_lease(c).await?;
        c.shared.etcd.get(&c.shared.keys.leader).await
    };
    match read.await {
        Ok(holder) => {
            let mut state = c.lock();
            state.reachable = true;
            state.told_unreachable = false;
            state.holder = holder.map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
        }
        Err(_) => c.lock().reachable = false,
    }
}

/// This replica's lease, alive now: the kept one renewed, or a new one.
async fn own_lease(c: &Coordinator) -> Result<i64, EtcdError> {
    let kept = c.lock().lease;
    if let Some(lease) = kept {
        if c.shared.etcd.keep_alive(lease).await?.is_some() {
            return Ok(lease);
        }
    }
    let lease = c.shared.etcd.grant_lease(c.shared.lease_ttl).await?;
    c.lock().lease = Some(lease.id);
    Ok(lease.id)
}

/// A new term. With an unsettled intent, latch before anything is admitted.
async fn took_over(c: &Coordinator, term: Term, intents: &[KeyValue]) {
    c.shared.metrics.took_over();
    let unsettled = intents.first().map(|kv| {
        serde_json::from_slice::<Intent>(&kv.value).map_or_else(
            |_| CommandRef::default(),
            |i| CommandRef::new(&i.request_id, &i.channel, i.method.as_deref()),
        )
    });
    {
        let mut state = c.lock();
        state.holder = Some(c.shared.instance_id.clone());
        // With an unsettled intent the term is never used to admit.
        state.active = Some(term);
    }
    let Some(command) = unsettled else {
        tracing::info!("won the coordination election: this replica is the active");
        return;
    };
    if c.lock().latch.is_some() {
        // The cluster is latched already (its intents are removed once the latch is
        // written): hold on that latch with every other replica.
        return;
    }
    tracing::error!(
        request_id = command.request_id.as_deref().unwrap_or("-"),
        unsettled = intents.len(),
        "won the coordination election and found an unsettled write-ahead intent: the previous active may have dispatched it without an acknowledgement"
    );
    let fatal = c
        .shared
        .fence
        .latch(FatalCategory::InterruptedBeforeAck, &command)
        .fatal;
    match c.publish_latch(&fatal).await {
        Ok(_) => {
            if let Err(e) = c.shared.etcd.delete_prefix(&c.shared.keys.intents).await {
                tracing::warn!(error = %e, "the cluster latch is set, but the intents could not be removed");
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "the cluster latch could not be written; the intent is kept, so the next active latches again")
        }
    }
}
