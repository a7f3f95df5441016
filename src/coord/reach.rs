//! Who can reach the control plane: each standby checks it (the run's [`ReachProbe`], an
//! authenticated request that takes no command) at a bounded rate and publishes the
//! result under `<prefix>/reach/<instance id>`, bound to its own lease so that a report
//! dies with its replica.
//!
//! The active measures its own reach with the same check, whenever the control plane has
//! been quiet for most of a check interval: no answered poll, acknowledged delivery or
//! check. A long poll may legitimately stay open for `poll_timeout`, so poll failures
//! alone notice a link that drops packets silently only after that (and the slack); the
//! check notices it within one interval, whatever `poll_timeout` is, and costs nothing
//! while commands flow. The control plane is unreachable since the earlier of the first
//! failed poll and the first failed check after the last answer.
//!
//! Once it has been unreachable for `coordination.step_down_after` (never counted from
//! before the term), and a standby's report that the control plane is reachable was
//! written since then (at a later etcd revision than one read after the failure began),
//! the active gives up its lease (revokes it) and becomes a standby that holds off
//! campaigning for `step_down_after`. A standby takes over at its next step.
//!
//! It steps down only with nothing in flight: no intent being recorded, none outstanding
//! and none unsettled, so that its successor never latches on a command this replica
//! could still settle. When no standby reports the control plane reachable, nobody steps
//! down (and `/readyz` says why the active is not ready).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::etcd::{KeyValue, Op, Txn};
use super::Coordinator;

/// Checks once that the control plane answers this replica's credentials; `Err` says why
/// not in words. Never takes a command.
pub(crate) type ReachProbe = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// The fastest a standby checks the control plane.
const MIN_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The shortest tick of the check loop.
const MIN_TICK: Duration = Duration::from_millis(250);

/// A standby's report under `<prefix>/reach/<instance id>` (schema_version 1).
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    schema_version: u32,
    instance_id: String,
    reachable: bool,
}

/// How often a standby checks: a quarter of `step_down_after`, at least once a second,
/// so that a few checks fall within any failure long enough to step down for.
fn check_interval(c: &Coordinator) -> Duration {
    (c.shared.step_down_after / 4).max(MIN_CHECK_INTERVAL)
}

/// How often the loop looks: a quarter of the check interval, at least every 250 ms.
fn tick(interval: Duration) -> Duration {
    (interval / 4).max(MIN_TICK)
}

/// What this replica checks at a tick.
enum Duty {
    /// A standby with a lease: check and publish, every [`check_interval`].
    Standby(i64),
    /// The active: check its own reach when the control plane has been quiet for three
    /// quarters of a [`check_interval`] (a long poll open and unanswered is quiet).
    Active,
    Nothing,
}

/// Until `stop`: a standby with a lease (and no cluster latch) checks the control plane
/// every [`check_interval`] and publishes the result; the active checks its own reach
/// whenever the control plane has been quiet for most of an interval, so that a link that
/// drops packets silently is noticed within one interval of the cut, whatever
/// `poll_timeout` is. Busy, the active never checks (every answered poll and
/// acknowledged delivery is an answer).
pub(super) async fn check_loop(c: &Coordinator, stop: &CancellationToken) {
    let interval = check_interval(c);
    let mut last_standby_check = Instant::now();
    loop {
        tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => return,
            // cancel-safe: a sleep.
            () = tokio::time::sleep(tick(interval)) => {}
        }
        let duty = {
            let state = c.lock();
            match (state.active.is_some(), state.latch.is_some(), state.lease) {
                (false, false, Some(lease)) => Duty::Standby(lease),
                (true, false, Some(_)) => Duty::Active,
                _ => Duty::Nothing,
            }
        };
        match duty {
            Duty::Standby(lease) if last_standby_check.elapsed() >= interval => {
                last_standby_check = Instant::now();
                let Some(reachable) = check(c, interval, stop).await else {
                    return;
                };
                if reachable {
                    // An answer to this replica: the age of its last exchange, and no
                    // failure of an earlier term of its own left standing.
                    c.shared.health.reach_succeeded();
                }
                publish_report(c, lease, reachable).await;
            }
            Duty::Active if quiet(c, interval) => {
                let started = Instant::now();
                let Some(reachable) = check(c, interval, stop).await else {
                    return;
                };
                if reachable {
                    c.shared.health.reach_succeeded();
                } else {
                    c.shared.health.reach_failed(started);
                }
            }
            _ => {}
        }
    }
}

/// Whether the control plane has not answered this replica for three quarters of
/// `interval` (or never has).
fn quiet(c: &Coordinator, interval: Duration) -> bool {
    c.shared
        .health
        .last_exchange_age()
        .is_none_or(|age| age >= interval * 3 / 4)
}

/// One check, bounded by `interval`: whether the control plane answered; `None` on
/// `stop`.
async fn check(c: &Coordinator, interval: Duration, stop: &CancellationToken) -> Option<bool> {
    let checked = tokio::select! {
        // cancel-safe: the check takes no command; dropping it loses nothing.
        () = stop.cancelled() => return None,
        r = tokio::time::timeout(interval, (c.shared.probe)()) => r,
    };
    let reachable = matches!(checked, Ok(Ok(())));
    if let Ok(Err(why)) | Err(why) = checked.map_err(|_| "no answer within the check interval".to_owned()) {
        tracing::debug!(reason = %why, "reach check: the control plane cannot be reached from this replica");
    }
    Some(reachable)
}

async fn publish_report(c: &Coordinator, lease: i64, reachable: bool) {
    {
        let mut state = c.lock();
        // Demoted or promoted meanwhile: the report would be stale.
        if state.active.is_some() || state.lease != Some(lease) {
            return;
        }
        state.control_plane_reachable = Some(reachable);
    }
    c.shared.metrics.control_plane_reachable(reachable);
    let report = Report {
        schema_version: 1,
        instance_id: c.shared.instance_id.clone(),
        reachable,
    };
    let key = format!("{}{}", c.shared.keys.reach, c.shared.instance_id);
    let value = serde_json::to_vec(&report).expect("a report serializes");
    if let Err(e) = c.shared.etcd.put(&key, &value, Some(lease)).await {
        tracing::debug!(error = %e, "standby check: the report could not be written to etcd");
    }
    c.publish();
}

/// Whether this replica stepped down less than `step_down_after` ago.
pub(super) fn holding_off(c: &Coordinator) -> bool {
    let mut state = c.lock();
    match state.hold_off_until {
        Some(until) if Instant::now() < until => true,
        Some(_) => {
            state.hold_off_until = None;
            tracing::info!("the hold-off after stepping down is over: campaigning again");
            false
        }
        None => false,
    }
}

/// The active's step after a renewal: nothing while its polls succeed; while they fail,
/// note etcd's revision once, then (after `step_down_after`) step down if a standby
/// reported the control plane reachable since.
pub(super) async fn consider_step_down(c: &Coordinator) {
    let Some(since) = failing_since(c) else { return };
    let txn = Txn {
        compare: vec![],
        success: vec![Op::Range {
            key: c.shared.keys.reach.clone(),
            prefix: true,
        }],
        failure: vec![],
    };
    let baseline = c.lock().failing.filter(|(at, _)| *at == since).map(|(_, rev)| rev);
    let Some(baseline) = baseline else {
        // The first look in this failure: every report written after this revision was
        // written after the polls began failing.
        if let Ok(r) = c.shared.etcd.txn(txn).await {
            c.lock().failing = Some((since, r.revision));
        }
        return;
    };
    if since.elapsed() < c.shared.step_down_after {
        return;
    }
    let Ok(response) = c.shared.etcd.txn(txn).await else {
        return;
    };
    let reports = response.ranges.first().map(Vec::as_slice).unwrap_or_default();
    match reachable_standby(c, reports, baseline) {
        Some(standby) => step_down(c, &standby, since.elapsed()).await,
        None => {
            if c.lock().told.replace(Waiting::NoStandby) != Some(Waiting::NoStandby) {
                tracing::error!(
                    failing_for_s = since.elapsed().as_secs(),
                    "the control plane has not been reached (every poll or reach check failed) for coordination.step_down_after, but no standby reports it reachable: keeping the lease"
                );
            }
        }
    }
}

/// While this replica is the active and the control plane cannot be reached (its polls
/// fail, or its own reach checks do): since when (never before the term began). `None`
/// (and the failure forgotten) while it is reached.
fn failing_since(c: &Coordinator) -> Option<Instant> {
    let failing = c.shared.health.unreachable_since();
    let mut state = c.lock();
    let term = state.active?;
    state.control_plane_reachable = Some(failing.is_none());
    c.shared.metrics.control_plane_reachable(failing.is_none());
    let Some(since) = failing else {
        state.failing = None;
        state.told = None;
        return None;
    };
    Some(since.max(term.started_at))
}

/// Why an active whose polls all fail has not stepped down yet (logged once each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waiting {
    /// No standby reports the control plane reachable.
    NoStandby,
    /// A command's intent is being recorded, outstanding or unsettled.
    InFlight,
}

/// Another replica whose report says the control plane is reachable, written after
/// `baseline`.
fn reachable_standby(c: &Coordinator, reports: &[KeyValue], baseline: i64) -> Option<String> {
    reports
        .iter()
        .filter(|kv| kv.mod_revision > baseline)
        .filter_map(|kv| serde_json::from_slice::<Report>(&kv.value).ok())
        .find(|r| r.reachable && r.instance_id != c.shared.instance_id)
        .map(|r| r.instance_id)
}

/// Gives up the lease, unless a command is in flight (then the next step looks again).
async fn step_down(c: &Coordinator, standby: &str, failing: Duration) {
    let lease = {
        let mut state = c.lock();
        let pending = state.pending_settle.is_some();
        if state.recording > 0 || state.outstanding.is_some() || pending || !state.unsettled.is_empty() {
            if state.told.replace(Waiting::InFlight) != Some(Waiting::InFlight) {
                tracing::warn!(
                    standby,
                    "the control plane has not been reached for coordination.step_down_after, but a command's intent is in flight: stepping down once it is settled"
                );
            }
            return;
        }
        // From here on the admission gate is closed: nothing can be recorded any more.
        state.active = None;
        state.holder = None;
        state.failing = None;
        state.told = None;
        state.step_downs += 1;
        state.hold_off_until = Some(Instant::now() + c.shared.step_down_after);
        state.lease.take()
    };
    c.shared.metrics.stepped_down();
    c.publish();
    tracing::warn!(
        standby,
        failing_for_s = failing.as_secs(),
        hold_off_s = c.shared.step_down_after.as_secs(),
        "the control plane has not been reached (every poll or reach check failed) for coordination.step_down_after while a standby reports it reachable: giving up the coordination lease"
    );
    if let Some(lease) = lease {
        if let Err(e) = c.shared.etcd.revoke(lease).await {
            tracing::warn!(error = %e, "could not give the coordination lease back; a standby takes over when it expires");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        let report = Report {
            schema_version: 1,
            instance_id: "gw-a".to_owned(),
            reachable: true,
        };
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(text, r#"{"schema_version":1,"instance_id":"gw-a","reachable":true}"#);
    }
}
