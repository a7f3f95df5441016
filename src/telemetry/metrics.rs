//! Every metric tunnelgate exports, declared once (names and labels are API).
//!
//! Core code calls intent-named methods; nothing else touches the registry. Label values
//! are closed sets, never ids or payload text. Every labelled series that alerts use is
//! created at zero at startup.

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::downstream::LegOutcome;
use crate::strict::FatalCategory;

/// Which response POST a delivery metric is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryKind {
    Terminal,
    Notify,
}

impl DeliveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Notify => "notify",
        }
    }
}

/// Why a command never reached downstream (`commands_dropped_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    Expired,
    Invalid,
    UnknownType,
    Unroutable,
    Fatal,
    Shutdown,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        Self::Expired,
        Self::Invalid,
        Self::UnknownType,
        Self::Unroutable,
        Self::Fatal,
        Self::Shutdown,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Invalid => "invalid",
            Self::UnknownType => "unknown_type",
            Self::Unroutable => "unroutable",
            Self::Fatal => "fatal",
            Self::Shutdown => "shutdown",
        }
    }
}

/// `command_duration_seconds{leg}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationLeg {
    Queue,
    FenceWait,
    Downstream,
    Deliver,
    Total,
}

impl DurationLeg {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::FenceWait => "fence_wait",
            Self::Downstream => "downstream",
            Self::Deliver => "deliver",
            Self::Total => "total",
        }
    }
}

pub const POLL_RESULTS: [&str; 3] = ["commands", "empty", "error"];
pub const POLL_ERROR_KINDS: [&str; 7] = [
    "timeout",
    "transport",
    "unauthorized",
    "rate_limited",
    "server_error",
    "client_error",
    "decode",
];
pub const COMMAND_TYPES: [&str; 3] = ["jsonrpc", "session_termination", "unknown"];
pub const DELIVERY_OUTCOMES: [&str; 4] = ["acked", "not_found", "rejected", "ambiguous"];
pub const ATTEMPT_RESULTS: [&str; 8] = [
    "ok",
    "not_found",
    "retryable_status",
    "rejected_status",
    "transport_not_sent",
    "transport_after_write",
    "timeout",
    "cancelled",
];

/// The metric set. Cheap to clone handles live inside; share it behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    polls: IntCounterVec,
    poll_errors: IntCounterVec,
    last_successful_poll: Gauge,
    commands_received: IntCounterVec,
    commands_dropped: IntCounterVec,
    downstream_requests: IntCounterVec,
    deliveries: IntCounterVec,
    delivery_attempts: IntCounterVec,
    command_duration: HistogramVec,
    fence_held: IntGauge,
    fatal_latched: IntGauge,
    fatal_latches: IntCounterVec,
    commands_in_flight: IntGauge,
    queue_depth: IntGauge,
    stdio_up: IntGaugeVec,
    stdio_restarts: IntCounterVec,
    stdout_garbage: IntCounter,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(format!("tunnelgate_{name}"), help), labels)
        .expect("metric definitions are valid");
    r.register(Box::new(c.clone())).expect("each metric is registered once");
    c
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(format!("tunnelgate_{name}"), help).expect("metric definitions are valid");
    r.register(Box::new(g.clone())).expect("each metric is registered once");
    g
}

impl Metrics {
    /// Registers every metric and creates the alerting series at zero.
    pub fn new(strict: bool, stdio_channels: &[String]) -> Self {
        let r = Registry::new();
        let build = IntGaugeVec::new(
            Opts::new("tunnelgate_build_info", "Build information; always 1."),
            &["version"],
        )
        .expect("metric definitions are valid");
        r.register(Box::new(build.clone())).expect("registered once");
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let strict_mode = int_gauge(&r, "strict_mode", "1 when strict mode is enabled.");
        strict_mode.set(i64::from(strict));

        let polls = counter_vec(&r, "polls_total", "Control-plane polls by result.", &["result"]);
        let poll_errors = counter_vec(&r, "poll_errors_total", "Failed polls by kind.", &["kind"]);
        let last_successful_poll = Gauge::new(
            "tunnelgate_last_successful_poll_timestamp_seconds",
            "Unix time of the last successful poll (0: none yet).",
        )
        .expect("metric definitions are valid");
        r.register(Box::new(last_successful_poll.clone()))
            .expect("registered once");
        let commands_received = counter_vec(
            &r,
            "commands_received_total",
            "Commands received by type.",
            &["command_type"],
        );
        let commands_dropped = counter_vec(
            &r,
            "commands_dropped_total",
            "Commands that never reached downstream, by reason.",
            &["reason"],
        );
        let downstream_requests = counter_vec(
            &r,
            "downstream_requests_total",
            "Downstream legs by transport and outcome (abandoned: effect unknown).",
            &["transport", "outcome"],
        );
        let deliveries = counter_vec(
            &r,
            "deliveries_total",
            "Response deliveries by kind and final outcome.",
            &["kind", "outcome"],
        );
        let delivery_attempts = counter_vec(
            &r,
            "delivery_attempts_total",
            "Response POST attempts by kind and result.",
            &["kind", "result"],
        );
        let command_duration = HistogramVec::new(
            HistogramOpts::new("tunnelgate_command_duration_seconds", "Time spent per command leg.").buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
            &["leg"],
        )
        .expect("metric definitions are valid");
        r.register(Box::new(command_duration.clone())).expect("registered once");
        let fence_held = int_gauge(&r, "fence_held", "1 while the strict fence is held.");
        let fatal_latched = int_gauge(&r, "fatal_latched", "1 once the fatal latch is set.");
        let fatal_latches = counter_vec(&r, "fatal_latches_total", "Fatal latches by category.", &["category"]);
        let commands_in_flight = int_gauge(&r, "commands_in_flight", "Commands admitted and not yet finished.");
        let queue_depth = int_gauge(&r, "queue_depth", "Commands received and waiting for a worker.");
        let stdio_up = IntGaugeVec::new(
            Opts::new("tunnelgate_stdio_up", "1 while the channel's stdio child runs."),
            &["channel"],
        )
        .expect("metric definitions are valid");
        r.register(Box::new(stdio_up.clone())).expect("registered once");
        let stdio_restarts = counter_vec(
            &r,
            "stdio_restarts_total",
            "Stdio child restarts by channel.",
            &["channel"],
        );
        let stdout_garbage = IntCounter::new(
            "tunnelgate_stdio_stdout_invalid_lines_total",
            "Non-JSON lines a stdio child printed on stdout (skipped).",
        )
        .expect("metric definitions are valid");
        r.register(Box::new(stdout_garbage.clone())).expect("registered once");

        for v in POLL_RESULTS {
            polls.with_label_values(&[v]);
        }
        for v in POLL_ERROR_KINDS {
            poll_errors.with_label_values(&[v]);
        }
        for v in COMMAND_TYPES {
            commands_received.with_label_values(&[v]);
        }
        for v in DropReason::ALL {
            commands_dropped.with_label_values(&[v.as_str()]);
        }
        for t in ["http", "stdio"] {
            for o in LegOutcome::ALL {
                downstream_requests.with_label_values(&[t, o.as_str()]);
            }
        }
        for k in [DeliveryKind::Terminal, DeliveryKind::Notify] {
            for o in DELIVERY_OUTCOMES {
                deliveries.with_label_values(&[k.as_str(), o]);
            }
            for a in ATTEMPT_RESULTS {
                delivery_attempts.with_label_values(&[k.as_str(), a]);
            }
        }
        for c in FatalCategory::ALL {
            fatal_latches.with_label_values(&[c.as_str()]);
        }
        for ch in stdio_channels {
            stdio_up.with_label_values(&[ch]);
            stdio_restarts.with_label_values(&[ch]);
        }

        Self {
            registry: r,
            polls,
            poll_errors,
            last_successful_poll,
            commands_received,
            commands_dropped,
            downstream_requests,
            deliveries,
            delivery_attempts,
            command_duration,
            fence_held,
            fatal_latched,
            fatal_latches,
            commands_in_flight,
            queue_depth,
            stdio_up,
            stdio_restarts,
            stdout_garbage,
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding of gathered metrics cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }

    pub fn poll_finished(&self, result: &'static str) {
        self.polls.with_label_values(&[result]).inc();
    }
    pub fn poll_failed(&self, kind: &'static str) {
        self.polls.with_label_values(&["error"]).inc();
        self.poll_errors.with_label_values(&[kind]).inc();
    }
    pub fn poll_succeeded_at(&self, unix_seconds: f64) {
        self.last_successful_poll.set(unix_seconds);
    }
    pub fn command_received(&self, command_type: &'static str) {
        self.commands_received.with_label_values(&[command_type]).inc();
    }
    pub fn command_dropped(&self, reason: DropReason) {
        self.commands_dropped.with_label_values(&[reason.as_str()]).inc();
    }
    pub fn downstream_finished(&self, transport: &'static str, outcome: LegOutcome) {
        self.downstream_requests
            .with_label_values(&[transport, outcome.as_str()])
            .inc();
    }
    pub fn delivery_finished(&self, kind: DeliveryKind, outcome: &'static str) {
        self.deliveries.with_label_values(&[kind.as_str(), outcome]).inc();
    }
    pub fn delivery_attempted(&self, kind: DeliveryKind, result: &'static str) {
        self.delivery_attempts.with_label_values(&[kind.as_str(), result]).inc();
    }
    pub fn leg_duration(&self, leg: DurationLeg, seconds: f64) {
        self.command_duration
            .with_label_values(&[leg.as_str()])
            .observe(seconds);
    }
    pub fn set_fence_held(&self, held: bool) {
        self.fence_held.set(i64::from(held));
    }
    pub fn fatal_latched(&self, category: FatalCategory) {
        self.fatal_latched.set(1);
        self.fatal_latches.with_label_values(&[category.as_str()]).inc();
    }
    pub fn set_in_flight(&self, n: usize) {
        self.commands_in_flight.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub fn set_queue_depth(&self, n: usize) {
        self.queue_depth.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub fn stdio_up(&self, channel: &str, up: bool) {
        self.stdio_up.with_label_values(&[channel]).set(i64::from(up));
    }
    pub fn stdio_restarted(&self, channel: &str) {
        self.stdio_restarts.with_label_values(&[channel]).inc();
    }
    pub fn stdio_invalid_line(&self) {
        self.stdout_garbage.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerting_series_exist_at_zero_from_startup() {
        let m = Metrics::new(true, &["main".to_owned()]);
        let text = m.render();
        for c in FatalCategory::ALL {
            assert!(
                text.contains(&format!(
                    "tunnelgate_fatal_latches_total{{category=\"{}\"}} 0",
                    c.as_str()
                )),
                "{c:?}"
            );
        }
        assert!(text.contains("tunnelgate_deliveries_total{kind=\"terminal\",outcome=\"ambiguous\"} 0"));
        assert!(text.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"http\"} 0"));
        assert!(text.contains("tunnelgate_stdio_up{channel=\"main\"} 0"));
        assert!(text.contains("tunnelgate_strict_mode 1"));
        assert!(text.contains(&format!(
            "tunnelgate_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }

    #[test]
    fn intent_methods_move_the_right_series() {
        let m = Metrics::new(false, &[]);
        m.fatal_latched(FatalCategory::AckNotFound);
        m.delivery_finished(DeliveryKind::Terminal, "not_found");
        let text = m.render();
        assert!(text.contains("tunnelgate_fatal_latches_total{category=\"ack_not_found\"} 1"));
        assert!(text.contains("tunnelgate_fatal_latched 1"));
        assert!(text.contains("tunnelgate_deliveries_total{kind=\"terminal\",outcome=\"not_found\"} 1"));
    }
}
