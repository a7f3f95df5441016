//! Strict mode across replicas on etcd: this replica's role, the lease holder, lease
//! renewals, takeovers, the intent operations, unsettled intents, step-downs and the
//! control plane's reachability as this replica last saw it.
//!
//! Every family is a vector, so none has a series (none is exported) until
//! [`Metrics::coordination_enabled`]: only a replica with `coordination.backend = "etcd"`
//! exports them. `coordination_holder_info` has one series, the holder's.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

use super::{all, at_zero, counter_vec, gauge_vec, Metrics};
use crate::telemetry::label::{CoordinationRole, IntentOp, IntentOpResult, LabelValue, RenewalResult};

/// Strict mode across replicas on etcd: this replica's role, the lease holder, lease
/// renewals, takeovers and the intent operations. Every family is a vector, so none has a
/// series (none is exported) until [`Metrics::coordination_enabled`].
pub(super) struct CoordinationFamilies {
    role: IntGaugeVec,
    holder: IntGaugeVec,
    renewals: IntCounterVec,
    takeovers: IntCounterVec,
    intent_ops: IntCounterVec,
    unsettled: IntGaugeVec,
    step_downs: IntCounterVec,
    reachable: IntGaugeVec,
}

impl CoordinationFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            role: gauge_vec(
                r,
                "coordination_role",
                "This replica's coordination role: 1 for the current one (active, standby, unavailable, latched), 0 for the others.",
                &["role"],
            ),
            holder: gauge_vec(
                r,
                "coordination_holder_info",
                "The instance id of the replica holding the coordination lease, as this replica last saw it; always 1.",
                &["holder"],
            ),
            renewals: counter_vec(
                r,
                "coordination_lease_renewals_total",
                "Renewals of this replica's coordination lease, by result.",
                &["result"],
            ),
            takeovers: counter_vec(
                r,
                "coordination_takeovers_total",
                "Times this replica won the election and became the active.",
                &[],
            ),
            intent_ops: counter_vec(
                r,
                "coordination_intent_ops_total",
                "Write-ahead intent transactions on etcd, by operation and result.",
                &["op", "result"],
            ),
            unsettled: gauge_vec(
                r,
                "coordination_unsettled_intents",
                "Intents of acknowledged commands whose settle etcd has not confirmed yet (retried while the term lasts).",
                &[],
            ),
            step_downs: counter_vec(
                r,
                "coordination_step_downs_total",
                "Times this replica gave up the lease because its polls all failed while a standby reported the control plane reachable.",
                &[],
            ),
            reachable: gauge_vec(
                r,
                "coordination_control_plane_reachable",
                "A standby's last check of the control plane (1 reachable, 0 not); the active reports 1 while its last poll succeeded.",
                &[],
            ),
        }
    }
}

impl Metrics {
    /// Creates the coordination series (at zero, role `unavailable`): only a replica with
    /// `coordination.backend = "etcd"` exports them.
    pub(crate) fn coordination_enabled(&self) {
        let c = &self.coordination;
        self.coordination_role(CoordinationRole::Unavailable);
        at_zero(&c.renewals, all::<RenewalResult>(), &[]);
        c.takeovers.with_label_values::<&str>(&[]);
        let results: Vec<_> = all::<IntentOpResult>().collect();
        at_zero(&c.intent_ops, all::<IntentOp>(), &results);
        c.unsettled.with_label_values::<&str>(&[]).set(0);
        c.step_downs.with_label_values::<&str>(&[]);
        c.reachable.with_label_values::<&str>(&[]).set(0);
    }

    /// Intents of acknowledged commands not yet settled in etcd.
    pub(crate) fn coordination_unsettled(&self, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.coordination.unsettled.with_label_values::<&str>(&[]).set(n);
    }

    pub(crate) fn stepped_down(&self) {
        self.coordination.step_downs.with_label_values::<&str>(&[]).inc();
    }

    /// Whether the control plane was reachable at this replica's last look.
    pub(crate) fn control_plane_reachable(&self, reachable: bool) {
        self.coordination
            .reachable
            .with_label_values::<&str>(&[])
            .set(i64::from(reachable));
    }

    /// This replica's role is now `role`.
    pub(crate) fn coordination_role(&self, role: CoordinationRole) {
        for r in all::<CoordinationRole>() {
            self.coordination
                .role
                .with_label_values(&[r])
                .set(i64::from(r == role.as_label()));
        }
    }

    /// The lease holder is now `holder` (`None`: nobody holds it).
    pub(crate) fn coordination_holder(&self, holder: Option<&str>) {
        self.coordination.holder.reset();
        if let Some(h) = holder {
            self.coordination.holder.with_label_values(&[h]).set(1);
        }
    }

    pub(crate) fn lease_renewed(&self, result: RenewalResult) {
        self.coordination.renewals.with_label_values(&[result.as_label()]).inc();
    }

    pub(crate) fn took_over(&self) {
        self.coordination.takeovers.with_label_values::<&str>(&[]).inc();
    }

    pub(crate) fn intent_op(&self, op: IntentOp, result: IntentOpResult) {
        self.coordination
            .intent_ops
            .with_label_values(&[op.as_label(), result.as_label()])
            .inc();
    }
}
