//! The `coordination` check (with `coordination.backend = "etcd"`): etcd answers, the
//! credentials are accepted, and who holds the lease now; a cluster-wide latch or an
//! unsettled intent waiting under the prefix fails it, as a persisted latch file does.
//!
//! Only reads: nothing is written to etcd and no lease is taken.

use std::time::Duration;

use super::report::Check;
use crate::config::Config;
use crate::coord::{read_cluster, Keys};

const NAME: &str = "coordination";

pub(super) async fn check(config: &Config, timeout: Duration) -> Option<Check> {
    let etcd_config = config.coordination.etcd.as_ref()?;
    let prefix = &etcd_config.prefix;
    let etcd = match crate::coord::client(etcd_config, timeout) {
        Ok(e) => e,
        Err(e) => return Some(Check::fail(NAME, format!("coordination.etcd: {e}"))),
    };
    let status = match etcd.status().await {
        Ok(s) => s,
        Err(e) => {
            return Some(Check::fail(
                NAME,
                format!("etcd does not answer ({e}): a strict replica neither polls nor dispatches without it; check coordination.etcd.endpoints and the network"),
            ))
        }
    };
    if etcd_config.credentials.is_some() {
        if let Err(e) = etcd.authenticate().await {
            return Some(Check::fail(
                NAME,
                format!("etcd refused the credentials ({e}); check coordination.etcd.username and coordination.etcd.password"),
            ));
        }
    }
    let keys = Keys::under(prefix);
    // The instance id of the replica that holds the lease, when one does.
    let holder = match etcd.get(&keys.leader).await {
        Ok(kv) => kv.map(|kv| String::from_utf8_lossy(&kv.value).into_owned()),
        Err(e) => {
            return Some(Check::fail(
                NAME,
                format!("cannot read {}: {e}; check the user's role on the prefix", keys.leader),
            ))
        }
    };
    let lease = match &holder {
        Some(instance) => format!("instance {instance} holds the lease"),
        None => "no replica holds the lease now".to_owned(),
    };
    let found = format!("etcd {} answers at {}; {lease}", status.version, status.endpoint);
    Some(match read_cluster(&etcd, &keys).await {
        Ok((Some(record), _)) => Check::fail(
            NAME,
            format!(
                "{found}; a cluster-wide latch is set by instance {}: {}; inspect with `tunnelgate latch show`, clear with `tunnelgate latch clear` once reconciled",
                record.latched_by,
                record.fatal.one_line()
            ),
        ),
        Ok((None, intents)) if !intents.is_empty() && holder.is_none() => Check::fail(
            NAME,
            format!(
                "{found}; {} unsettled write-ahead intent(s) under {prefix}: the next active latches interrupted_before_ack; see `tunnelgate latch show`",
                intents.len()
            ),
        ),
        Ok(_) => Check::ok(NAME, found),
        Err(e) => Check::fail(NAME, format!("{found}; cannot read the latch under {prefix}: {e}")),
    })
}
