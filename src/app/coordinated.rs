//! The start of a run's work, with or without coordination. Without it, the stdio keepers
//! and the poller start at once. With `coordination.backend = "etcd"`, the coordinator
//! runs the election and the latch watch, and the poller runs only while this replica is
//! the active: a standby never polls and never touches an MCP server (its stdio children
//! are started only while it is the active; one that dies on a replica demoted meanwhile
//! is started again once that replica is the active again).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::build::Parts;
use super::stop::StopSignals;
use super::GatewayError;
use crate::config::Config;
use crate::control::ControlClient;
use crate::coord::{Coordinator, ReachProbe, Timing};
use crate::dispatch::Dispatcher;
use crate::supervisor::{TaskEnd, TaskKind};

/// How long the end of a run waits for the coordinator to give its lease back.
const RESIGN_BOUND: Duration = Duration::from_secs(3);

impl Parts {
    /// Builds the coordinator when `coordination.backend = "etcd"` (nothing is contacted
    /// yet). A standby checks the control plane with `control`'s tunnel lookup.
    pub(super) fn coordinated(mut self, config: &Config, control: &ControlClient) -> Result<Self, GatewayError> {
        if let Some(etcd) = &config.coordination.etcd {
            let timing = Timing {
                lease_ttl: config.coordination.lease_ttl,
                step_down_after: config.coordination.step_down_after,
            };
            let coordinator = Coordinator::new(
                etcd,
                timing,
                &self.instance_id,
                (self.metrics.clone(), self.health.clone()),
                self.fence.clone(),
                reach_probe(control.clone(), timing),
            )
            .map_err(GatewayError::Coordination)?;
            self.coordinator = Some(coordinator);
        }
        Ok(self)
    }

    /// Starts the work of a run: the coordinator (if any), the channels' keepers and the
    /// poller.
    pub(super) fn start(&mut self, dispatcher: &Arc<Dispatcher>, signals: &StopSignals) {
        let Some(coordinator) = self.coordinator.clone() else {
            dispatcher.keep_stdio_sessions();
            self.supervisor.spawn(
                TaskKind::Poller,
                dispatcher.clone().poll_loop(signals.poll_stop.clone()),
            );
            return;
        };
        let may_poll = coordinator.may_poll();
        let stop = self.coordination_stop.clone();
        self.coordination_task = Some(self.supervisor.spawn_untracked(TaskKind::Coordinator, async move {
            coordinator.run(stop).await;
            TaskEnd::Finished
        }));
        self.supervisor.spawn(
            TaskKind::Poller,
            polls_while_active(dispatcher.clone(), may_poll, signals.poll_stop.clone()),
        );
    }

    /// Stops the coordinator and waits (bounded) for it to give its lease back.
    pub(super) async fn stop_coordination(&mut self) {
        self.coordination_stop.cancel();
        if let Some(task) = self.coordination_task.take() {
            if tokio::time::timeout(RESIGN_BOUND, task).await.is_err() {
                tracing::warn!("the coordinator did not end in time; a standby takes over when the lease expires");
            }
        }
    }
}

/// A standby's check of the control plane: the tunnel lookup `doctor` makes (it
/// authenticates as a poll does and takes no command), answered 2xx.
fn reach_probe(control: ControlClient, timing: Timing) -> ReachProbe {
    let timeout = (timing.step_down_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(5));
    Arc::new(move || {
        let control = control.clone();
        Box::pin(async move {
            match control.get_tunnel(timeout).await {
                Ok(status) if status.is_success() => Ok(()),
                Ok(status) => Err(format!("the tunnel lookup was answered {}", status.as_u16())),
                Err(e) => Err(e.to_string()),
            }
        })
    })
}

/// The poll loop, run only while `may_poll` is true: started when this replica becomes
/// the active, stopped when it is not any more, until `stop` (or the fence latches).
async fn polls_while_active(
    dispatcher: Arc<Dispatcher>,
    mut may_poll: watch::Receiver<bool>,
    stop: CancellationToken,
) -> TaskEnd {
    let mut keepers_started = false;
    loop {
        let became_active = tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => false,
            active = may_poll.wait_for(|active| *active) => active.is_ok(),
        };
        if !became_active {
            return TaskEnd::Finished;
        }
        if !keepers_started {
            dispatcher.keep_stdio_sessions_while(may_poll.clone());
            keepers_started = true;
        }
        let term = stop.child_token();
        let polls = dispatcher.clone().poll_loop(term.clone());
        tokio::pin!(polls);
        let demoted = tokio::select! {
            // The poll loop ended on its own: the run is stopping or latched.
            end = &mut polls => return end,
            // cancel-safe: waiting on a watch; the poll loop is stopped and awaited below.
            changed = may_poll.wait_for(|active| !*active) => changed.is_ok(),
        };
        tracing::info!("no longer the active replica: polling stops");
        term.cancel();
        let end = polls.await;
        if !demoted {
            return end;
        }
    }
}
