//! The cluster-wide latch: `<prefix>/latch`, the latch record of the replica that latched
//! (the same privacy-safe cause the latch file holds, plus who latched), with no lease so
//! that it outlives every pod. The first latch wins (written only if absent). Every
//! replica watches the key: while it is set a replica neither polls nor admits, reports
//! the category (`/readyz` 503, `tunnelgate_fatal_info`), and goes on once it is cleared.

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::etcd::{CmpOp, Compare, Etcd, EtcdError, KeyValue, Op, Txn, WatchKind};
use super::{Coordinator, Keys};
use crate::strict::Fatal;

/// The record under `<prefix>/latch` (schema_version 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub schema_version: u32,
    pub tunnelgate_version: String,
    /// The instance id of the replica that latched.
    pub latched_by: String,
    pub fatal: Fatal,
}

impl ClusterRecord {
    fn of(fatal: &Fatal, latched_by: &str) -> Self {
        // The record is itself the persisted latch of the cluster.
        let mut fatal = fatal.clone();
        fatal.persisted = true;
        Self {
            schema_version: 1,
            tunnelgate_version: env!("CARGO_PKG_VERSION").to_owned(),
            latched_by: latched_by.to_owned(),
            fatal,
        }
    }

    /// The record a key holds; an unreadable one is still a latch (fail closed), with the
    /// `latched_previously` category and no command.
    fn read(kv: &KeyValue) -> Self {
        serde_json::from_slice(&kv.value).unwrap_or_else(|_| {
            let fatal = Fatal::new(
                crate::strict::FatalCategory::LatchedPreviously,
                &crate::strict::CommandRef::default(),
            );
            Self::of(&fatal, "unreadable record")
        })
    }
}

pub(super) async fn publish(c: &Coordinator, fatal: &Fatal) -> Result<bool, EtcdError> {
    let record = ClusterRecord::of(fatal, &c.shared.instance_id);
    let bytes = serde_json::to_vec(&record).expect("the record serializes");
    let key = c.shared.keys.latch.clone();
    let response = c
        .shared
        .etcd
        .txn(Txn {
            compare: vec![Compare::CreateRevision(key.clone(), CmpOp::Equal, 0)],
            success: vec![Op::Put {
                key,
                value: bytes,
                lease: None,
            }],
            failure: vec![],
        })
        .await?;
    if response.succeeded {
        tracing::error!(
            category = fatal.category.as_str(),
            "cluster-wide latch set: every replica holds until `tunnelgate latch clear`"
        );
    }
    Ok(response.succeeded)
}

/// Reads the latch now, then follows it through a watch from the revision read, until
/// `stop`. A watch that ends or fails is started again after a renewal interval.
pub(super) async fn watch_loop(c: Coordinator, stop: CancellationToken) {
    loop {
        if let Err(e) = follow(&c, &stop).await {
            tracing::debug!(error = %e, "the cluster latch watch ended; starting it again");
        }
        tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => return,
            () = tokio::time::sleep(c.renew_interval()) => {}
        }
    }
}

async fn follow(c: &Coordinator, stop: &CancellationToken) -> Result<(), EtcdError> {
    let key = &c.shared.keys.latch;
    let response = c
        .shared
        .etcd
        .txn(Txn {
            compare: vec![],
            success: vec![Op::Range {
                key: key.clone(),
                prefix: false,
            }],
            failure: vec![],
        })
        .await?;
    let now = response.ranges.first().and_then(|r| r.first()).map(ClusterRecord::read);
    set(c, now);
    let mut watch = c.shared.etcd.watch(key, Some(response.revision + 1)).await?;
    loop {
        let events = tokio::select! {
            // cancel-safe: waiting only; the watch is dropped with this future.
            () = stop.cancelled() => return Ok(()),
            next = watch.next() => match next {
                Some(events) => events?,
                None => return Ok(()),
            },
        };
        for event in events {
            match event.kind {
                WatchKind::Put => set(c, Some(ClusterRecord::read(&event.kv))),
                WatchKind::Delete => set(c, None),
            }
        }
    }
}

/// A latch record read by the election's transaction.
pub(super) fn known(c: &Coordinator, kv: &KeyValue) {
    set(c, Some(ClusterRecord::read(kv)));
}

/// Records the cluster latch as now known, and tells the metrics and health.
fn set(c: &Coordinator, latch: Option<ClusterRecord>) {
    let changed = {
        let mut state = c.lock();
        let changed = state.latch != latch;
        state.latch.clone_from(&latch);
        changed
    };
    if !changed {
        return;
    }
    match &latch {
        Some(record) => {
            c.shared.metrics.fatal_info(record.fatal.category);
            tracing::error!(
                category = record.fatal.category.as_str(),
                request_id = record.fatal.request_id.as_deref().unwrap_or("-"),
                latched_by = %record.latched_by,
                "a cluster-wide latch is set: this replica neither polls nor dispatches until it is cleared"
            );
        }
        None => {
            if c.shared.fence.fatal().is_none() {
                c.shared.metrics.fatal_info_cleared();
            }
            tracing::warn!("the cluster-wide latch was cleared: this replica campaigns again");
        }
    }
    c.publish();
}

/// The cluster latch of `keys` and the unsettled intents, as `tunnelgate latch show`
/// reads them.
pub async fn read_cluster(etcd: &Etcd, keys: &Keys) -> Result<(Option<ClusterRecord>, Vec<KeyValue>), EtcdError> {
    let latch = etcd.get(&keys.latch).await?;
    let intents = etcd.get_prefix(&keys.intents).await?;
    Ok((latch.as_ref().map(ClusterRecord::read), intents))
}

/// Clears the cluster latch and every unsettled intent (`tunnelgate latch clear`). Returns
/// whether a latch was set, and how many intents were removed.
pub async fn clear_cluster(etcd: &Etcd, keys: &Keys) -> Result<(bool, u64), EtcdError> {
    let intents = etcd.delete_prefix(&keys.intents).await?;
    let latch = etcd.delete(&keys.latch).await?;
    Ok((latch > 0, intents))
}
