//! Every metric tunnelgate exports, declared once (names and labels are API).
//!
//! Core code calls intent-named methods; nothing else touches the registry. Label values
//! are closed sets, never ids or payload text: each comes from an enum implementing
//! [`LabelValue`] (see [`super::label`]), and a label filled from upstairs takes only the
//! enum that owns it. Every labelled series that alerts use is created at zero at startup.

use std::collections::BTreeMap;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::label::{
    AttemptResultLabel, CommandType, CoordinationRole, DeliveryKind, DeliveryLabel, DropReason, DurationLeg,
    FatalCategoryLabel, IntentOp, IntentOpResult, LabelSets, LabelValue, LegOutcomeLabel, PollErrorLabel, PollResult,
    ReceiptDropReason, RenewalResult, SessionResult, TaskKind, TraceContextSource, TransportLabel,
};

/// The metric set. Cheap to clone handles live inside; share it behind an `Arc`.
///
/// Each label takes the one enum that owns it, checked by the compiler: swapped
/// arguments do not build.
///
/// ```compile_fail,E0277
/// use tunnelgate::downstream::{LegOutcome, TransportKind};
///
/// fn swapped(metrics: &tunnelgate::telemetry::Metrics) {
///     metrics.downstream_finished(LegOutcome::Answered, TransportKind::Http);
/// }
/// ```
///
/// ```
/// use tunnelgate::downstream::{LegOutcome, TransportKind};
///
/// fn in_order(metrics: &tunnelgate::telemetry::Metrics) {
///     metrics.downstream_finished(TransportKind::Http, LegOutcome::Answered);
/// }
/// ```
pub struct Metrics {
    registry: Registry,
    poll: PollFamilies,
    commands: CommandFamilies,
    delivery: DeliveryFamilies,
    strict: StrictFamilies,
    stdio: StdioFamilies,
    internals: InternalFamilies,
    receipts: ReceiptFamilies,
    health_receipts: HealthReceiptFamilies,
    coordination: CoordinationFamilies,
}

/// `polls_total`, `poll_errors_total`, `last_successful_poll_timestamp_seconds`.
struct PollFamilies {
    polls: IntCounterVec,
    poll_errors: IntCounterVec,
    last_successful_poll: Gauge,
    polls_abandoned: IntCounter,
}

/// What happens to commands: received, dropped, timed per leg, in flight, queued.
struct CommandFamilies {
    commands_received: IntCounterVec,
    commands_dropped: IntCounterVec,
    command_duration: HistogramVec,
    commands_in_flight: IntGauge,
    queue_depth: IntGauge,
}

/// Downstream legs and response deliveries: the outcomes of truth.
struct DeliveryFamilies {
    downstream_requests: IntCounterVec,
    deliveries: IntCounterVec,
    delivery_attempts: IntCounterVec,
    responses_too_large: IntCounter,
}

/// The fence and the fatal latch.
struct StrictFamilies {
    fence_held: IntGauge,
    fatal_latched: IntGauge,
    fatal_latches: IntCounterVec,
    fatal_info: IntGaugeVec,
}

/// stdio children, per configured channel.
struct StdioFamilies {
    stdio_up: IntGaugeVec,
    stdio_restarts: IntCounterVec,
    stdio_late_responses: IntCounterVec,
    stdio_sessions: IntCounterVec,
    stdout_garbage: IntCounter,
}

/// The gateway's own health: failed tasks, malformed trace context.
struct InternalFamilies {
    task_failures: IntCounterVec,
    trace_context_invalid: IntCounterVec,
}

/// Buckets of `command_duration_seconds`, in seconds.
const DURATION_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// `metric`, registered in `r` (each metric once).
fn registered<C: Collector + Clone + 'static>(r: &Registry, metric: C) -> C {
    r.register(Box::new(metric.clone()))
        .expect("each metric is registered once");
    metric
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(format!("tunnelgate_{name}"), help), labels);
    registered(r, c.expect("metric definitions are valid"))
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(format!("tunnelgate_{name}"), help), labels);
    registered(r, g.expect("metric definitions are valid"))
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(format!("tunnelgate_{name}"), help);
    registered(r, g.expect("metric definitions are valid"))
}

fn int_counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(format!("tunnelgate_{name}"), help);
    registered(r, c.expect("metric definitions are valid"))
}

fn gauge(r: &Registry, name: &str, help: &str) -> Gauge {
    let g = Gauge::new(format!("tunnelgate_{name}"), help);
    registered(r, g.expect("metric definitions are valid"))
}

fn histogram_vec(r: &Registry, name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(format!("tunnelgate_{name}"), help).buckets(buckets.to_vec());
    registered(
        r,
        HistogramVec::new(opts, labels).expect("metric definitions are valid"),
    )
}

/// The label values of `T`, in declaration order.
fn all<T: LabelValue>() -> impl Iterator<Item = &'static str> {
    T::ALL.iter().map(|v| v.as_label())
}

/// Creates the series of `family` at zero: one per value of `first` when `family` has one
/// label (`second` empty), else one per pair of values. A histogram's series so created
/// export every bucket, `_sum` and `_count` at zero before the first observation.
fn at_zero<B: MetricVecBuilder>(
    family: &MetricVec<B>,
    first: impl Iterator<Item = &'static str>,
    second: &[&'static str],
) {
    for a in first {
        if second.is_empty() {
            family.with_label_values(&[a]);
        }
        for b in second {
            family.with_label_values(&[a, b]);
        }
    }
}

impl PollFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            polls: counter_vec(r, "polls_total", "Control-plane polls by result.", &["result"]),
            poll_errors: counter_vec(r, "poll_errors_total", "Failed polls by kind.", &["kind"]),
            last_successful_poll: gauge(
                r,
                "last_successful_poll_timestamp_seconds",
                "Unix time of the last successful poll (0: none yet).",
            ),
            polls_abandoned: int_counter(
                r,
                "polls_abandoned_total",
                "Open polls a stop or a demotion could not wait for: dropped before their answer, any commands they were handed are unanswered.",
            ),
        }
    }
}

impl CommandFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            commands_received: counter_vec(
                r,
                "commands_received_total",
                "Commands received by type.",
                &["command_type"],
            ),
            commands_dropped: counter_vec(
                r,
                "commands_dropped_total",
                "Commands that never reached downstream, by reason.",
                &["reason"],
            ),
            command_duration: histogram_vec(
                r,
                "command_duration_seconds",
                "Time spent per command leg.",
                &DURATION_BUCKETS,
                &["leg"],
            ),
            commands_in_flight: int_gauge(r, "commands_in_flight", "Commands admitted and not yet finished."),
            queue_depth: int_gauge(r, "queue_depth", "Commands received and waiting for a worker."),
        }
    }
}

impl DeliveryFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            downstream_requests: counter_vec(
                r,
                "downstream_requests_total",
                "Downstream legs by transport and outcome (abandoned: effect unknown).",
                &["transport", "outcome"],
            ),
            deliveries: counter_vec(
                r,
                "deliveries_total",
                "Response deliveries by kind and final outcome.",
                &["kind", "outcome"],
            ),
            delivery_attempts: counter_vec(
                r,
                "delivery_attempts_total",
                "Response POST attempts by kind and result.",
                &["kind", "result"],
            ),
            responses_too_large: int_counter(
                r,
                "responses_too_large_total",
                "Terminal responses the control plane refused as larger than it accepts (413 request_body_too_large); the caller of a JSON-RPC request is sent a small error instead.",
            ),
        }
    }
}

impl StrictFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            fence_held: int_gauge(r, "fence_held", "1 while the strict fence is held."),
            fatal_latched: int_gauge(r, "fatal_latched", "1 once the fatal latch is set."),
            fatal_latches: counter_vec(r, "fatal_latches_total", "Fatal latches by category.", &["category"]),
            fatal_info: gauge_vec(
                r,
                "fatal_info",
                "1 for the category of the fatal latch; no series while not latched.",
                &["category"],
            ),
        }
    }
}

impl StdioFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            stdio_up: gauge_vec(
                r,
                "stdio_up",
                "1 while the channel's stdio child runs with its MCP session open (or passed through).",
                &["channel"],
            ),
            stdio_restarts: counter_vec(
                r,
                "stdio_restarts_total",
                "Stdio child restarts by channel.",
                &["channel"],
            ),
            stdio_late_responses: counter_vec(
                r,
                "stdio_late_responses_total",
                "Responses a stdio child sent for a request already retired (discarded), by channel.",
                &["channel"],
            ),
            stdio_sessions: counter_vec(
                r,
                "stdio_sessions_total",
                "The gateway's own handshakes with stdio children, by channel and how each ended.",
                &["channel", "result"],
            ),
            stdout_garbage: int_counter(
                r,
                "stdio_stdout_invalid_lines_total",
                "Non-JSON lines a stdio child printed on stdout (skipped).",
            ),
        }
    }
}

impl InternalFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            task_failures: counter_vec(
                r,
                "task_failures_total",
                "Gateway tasks that ended unexpectedly (panic or error), by task.",
                &["task"],
            ),
            trace_context_invalid: counter_vec(
                r,
                "trace_context_invalid_total",
                "Malformed W3C trace context in commands (ignored), by where it was found.",
                &["source"],
            ),
        }
    }
}

impl Metrics {
    /// Registers every metric and creates the alerting series at zero: every value of
    /// every closed label set (`L` names the upstairs ones), and each configured stdio
    /// channel.
    pub fn new<L: LabelSets>(strict: bool, stdio_channels: &[String]) -> Self {
        let metrics = Self::register(Registry::new(), strict);
        metrics.create_series_at_zero::<L>(stdio_channels);
        metrics
    }

    /// Every metric family: its name, help and labels (API), by concern. `build_info` and
    /// `strict_mode` are set here and never change.
    fn register(r: Registry, strict: bool) -> Self {
        let build = gauge_vec(&r, "build_info", "Build information; always 1.", &["version"]);
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        int_gauge(&r, "strict_mode", "1 when strict mode is enabled.").set(i64::from(strict));
        Self {
            poll: PollFamilies::register(&r),
            commands: CommandFamilies::register(&r),
            delivery: DeliveryFamilies::register(&r),
            strict: StrictFamilies::register(&r),
            stdio: StdioFamilies::register(&r),
            internals: InternalFamilies::register(&r),
            receipts: ReceiptFamilies::register(&r),
            health_receipts: HealthReceiptFamilies::register(&r),
            coordination: CoordinationFamilies::register(&r),
            registry: r,
        }
    }

    /// The series alerts and the dashboard use, at zero before anything happens: every
    /// value of every closed label set (the latency histogram's `leg` included, each with
    /// its buckets at zero; `fatal_info` excepted: it has a series only once latched), and
    /// each configured stdio channel.
    fn create_series_at_zero<L: LabelSets>(&self, stdio_channels: &[String]) {
        at_zero(&self.poll.polls, all::<PollResult>(), &[]);
        at_zero(&self.poll.poll_errors, all::<L::PollErrorKind>(), &[]);
        at_zero(&self.commands.commands_received, all::<CommandType>(), &[]);
        at_zero(&self.commands.commands_dropped, all::<DropReason>(), &[]);
        at_zero(&self.commands.command_duration, all::<DurationLeg>(), &[]);
        let outcomes: Vec<_> = all::<L::LegOutcome>().collect();
        at_zero(&self.delivery.downstream_requests, all::<L::Transport>(), &outcomes);
        let deliveries: Vec<_> = all::<L::Delivery>().collect();
        at_zero(&self.delivery.deliveries, all::<DeliveryKind>(), &deliveries);
        let attempts: Vec<_> = all::<L::AttemptResult>().collect();
        at_zero(&self.delivery.delivery_attempts, all::<DeliveryKind>(), &attempts);
        at_zero(&self.strict.fatal_latches, all::<L::FatalCategory>(), &[]);
        for ch in stdio_channels {
            self.stdio.stdio_up.with_label_values(&[ch]);
            self.stdio.stdio_restarts.with_label_values(&[ch]);
            self.stdio.stdio_late_responses.with_label_values(&[ch]);
            for result in all::<SessionResult>() {
                self.stdio.stdio_sessions.with_label_values(&[ch, result]);
            }
        }
        at_zero(&self.internals.task_failures, all::<TaskKind>(), &[]);
        at_zero(&self.internals.trace_context_invalid, all::<TraceContextSource>(), &[]);
        at_zero(&self.receipts.dropped, all::<ReceiptDropReason>(), &[]);
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding of gathered metrics cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }

    pub fn poll_finished(&self, result: PollResult) {
        self.poll.polls.with_label_values(&[result.as_label()]).inc();
    }
    pub fn poll_failed(&self, kind: impl PollErrorLabel) {
        self.poll.polls.with_label_values(&[PollResult::Error.as_label()]).inc();
        self.poll.poll_errors.with_label_values(&[kind.as_label()]).inc();
    }
    pub fn poll_succeeded_at(&self, unix_seconds: f64) {
        self.poll.last_successful_poll.set(unix_seconds);
    }
    /// An open poll was dropped, its answer not awaited, when polling stopped.
    pub fn poll_abandoned(&self) {
        self.poll.polls_abandoned.inc();
    }
    pub fn command_received(&self, command_type: CommandType) {
        self.commands
            .commands_received
            .with_label_values(&[command_type.as_label()])
            .inc();
    }
    pub fn command_dropped(&self, reason: DropReason) {
        self.commands
            .commands_dropped
            .with_label_values(&[reason.as_label()])
            .inc();
    }
    pub fn downstream_finished(&self, transport: impl TransportLabel, outcome: impl LegOutcomeLabel) {
        self.delivery
            .downstream_requests
            .with_label_values(&[transport.as_label(), outcome.as_label()])
            .inc();
    }
    pub fn delivery_finished(&self, kind: DeliveryKind, outcome: impl DeliveryLabel) {
        self.delivery
            .deliveries
            .with_label_values(&[kind.as_label(), outcome.as_label()])
            .inc();
    }
    pub fn delivery_attempted(&self, kind: DeliveryKind, result: impl AttemptResultLabel) {
        self.delivery
            .delivery_attempts
            .with_label_values(&[kind.as_label(), result.as_label()])
            .inc();
    }
    /// The control plane refused a terminal response as too large.
    pub fn response_too_large(&self) {
        self.delivery.responses_too_large.inc();
    }
    pub fn leg_duration(&self, leg: DurationLeg, seconds: f64) {
        self.commands
            .command_duration
            .with_label_values(&[leg.as_label()])
            .observe(seconds);
    }
    pub fn set_fence_held(&self, held: bool) {
        self.strict.fence_held.set(i64::from(held));
    }
    pub fn fatal_latched(&self, category: impl FatalCategoryLabel) {
        let category = category.as_label();
        self.strict.fatal_latched.set(1);
        self.strict.fatal_latches.with_label_values(&[category]).inc();
        self.strict.fatal_info.reset();
        self.strict.fatal_info.with_label_values(&[category]).set(1);
    }
    /// Sets `fatal_info{category}` to 1 for the latch's category, the only series of
    /// that metric (none exists until the latch is set).
    pub fn fatal_info(&self, category: impl FatalCategoryLabel) {
        let category = category.as_label();
        self.strict.fatal_info.reset();
        self.strict.fatal_info.with_label_values(&[category]).set(1);
    }
    /// No latch is in force any more (a cluster-wide latch was cleared).
    pub fn fatal_info_cleared(&self) {
        self.strict.fatal_info.reset();
    }
    pub fn set_in_flight(&self, n: usize) {
        self.commands
            .commands_in_flight
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub fn set_queue_depth(&self, n: usize) {
        self.commands.queue_depth.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub fn stdio_up(&self, channel: &str, up: bool) {
        self.stdio.stdio_up.with_label_values(&[channel]).set(i64::from(up));
    }
    pub fn stdio_restarted(&self, channel: &str) {
        self.stdio.stdio_restarts.with_label_values(&[channel]).inc();
    }
    /// A stdio child answered a request that was already retired; the answer was discarded.
    pub fn stdio_late_response(&self, channel: &str) {
        self.stdio.stdio_late_responses.with_label_values(&[channel]).inc();
    }
    /// The gateway's handshake with a stdio child of `channel` ended with `result`.
    pub fn stdio_session(&self, channel: &str, result: SessionResult) {
        self.stdio
            .stdio_sessions
            .with_label_values(&[channel, result.as_label()])
            .inc();
    }
    pub fn stdio_invalid_line(&self) {
        self.stdio.stdout_garbage.inc();
    }
    /// A gateway task ended unexpectedly (a panic, or an error it could not handle).
    pub fn task_failed(&self, task: TaskKind) {
        self.internals.task_failures.with_label_values(&[task.as_label()]).inc();
    }

    /// A command carried a trace context that is not valid W3C: ignored, counted here.
    pub fn trace_context_invalid(&self, source: TraceContextSource) {
        self.internals
            .trace_context_invalid
            .with_label_values(&[source.as_label()])
            .inc();
    }

    /// Where every received command went, from the counters: each one ends in exactly
    /// one downstream leg outcome or one drop reason.
    pub fn accounting(&self) -> Accounting {
        let dropped = DropReason::ALL
            .iter()
            .map(|r| {
                (
                    r.as_label(),
                    self.commands.commands_dropped.with_label_values(&[r.as_label()]).get(),
                )
            })
            .collect();
        let mut terminal = Vec::new();
        for m in Collector::collect(&self.delivery.deliveries)
            .iter()
            .flat_map(|f| f.get_metric())
        {
            let labels: Vec<(&str, &str)> = m.get_label().iter().map(|l| (l.name(), l.value())).collect();
            if labels.contains(&("kind", "terminal")) {
                if let Some((_, outcome)) = labels.iter().find(|(n, _)| *n == "outcome") {
                    terminal.push(((*outcome).to_owned(), m.get_counter().get_value() as u64));
                }
            }
        }
        Accounting {
            received: total(&self.commands.commands_received),
            legs: total(&self.delivery.downstream_requests),
            dropped,
            terminal,
        }
    }
}

/// The delivery-receipt journal: lines written, and lines dropped by reason.
struct ReceiptFamilies {
    written: IntCounter,
    dropped: IntCounterVec,
}

impl ReceiptFamilies {
    fn register(r: &Registry) -> Self {
        Self {
            written: int_counter(
                r,
                "receipts_written_total",
                "Delivery receipts written to the journal (receipts.path).",
            ),
            dropped: counter_vec(
                r,
                "receipts_dropped_total",
                "Delivery receipts not written, by reason (the commands were not affected).",
                &["reason"],
            ),
        }
    }
}

impl Metrics {
    /// `n` delivery receipts reached the journal file.
    pub fn receipts_written(&self, n: u64) {
        self.receipts.written.inc_by(n);
    }

    /// `n` delivery receipts were dropped for `reason`.
    pub fn receipts_dropped(&self, reason: ReceiptDropReason, n: u64) {
        self.receipts.dropped.with_label_values(&[reason.as_label()]).inc_by(n);
    }
}

/// Strict mode across replicas on etcd: this replica's role, the lease holder, lease
/// renewals, takeovers and the intent operations. Every family is a vector, so none has a
/// series (none is exported) until [`Metrics::coordination_enabled`].
struct CoordinationFamilies {
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
    fn register(r: &Registry) -> Self {
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
    pub fn coordination_enabled(&self) {
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
    pub fn coordination_unsettled(&self, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.coordination.unsettled.with_label_values::<&str>(&[]).set(n);
    }

    pub fn stepped_down(&self) {
        self.coordination.step_downs.with_label_values::<&str>(&[]).inc();
    }

    /// Whether the control plane was reachable at this replica's last look.
    pub fn control_plane_reachable(&self, reachable: bool) {
        self.coordination
            .reachable
            .with_label_values::<&str>(&[])
            .set(i64::from(reachable));
    }

    /// This replica's role is now `role`.
    pub fn coordination_role(&self, role: CoordinationRole) {
        for r in all::<CoordinationRole>() {
            self.coordination
                .role
                .with_label_values(&[r])
                .set(i64::from(r == role.as_label()));
        }
    }

    /// The lease holder is now `holder` (`None`: nobody holds it).
    pub fn coordination_holder(&self, holder: Option<&str>) {
        self.coordination.holder.reset();
        if let Some(h) = holder {
            self.coordination.holder.with_label_values(&[h]).set(1);
        }
    }

    pub fn lease_renewed(&self, result: RenewalResult) {
        self.coordination.renewals.with_label_values(&[result.as_label()]).inc();
    }

    pub fn took_over(&self) {
        self.coordination.takeovers.with_label_values::<&str>(&[]).inc();
    }

    pub fn intent_op(&self, op: IntentOp, result: IntentOpResult) {
        self.coordination
            .intent_ops
            .with_label_values(&[op.as_label(), result.as_label()])
            .inc();
    }
}

/// Every outcome counted since start, as `/status` `outcomes` shows it (keys are API):
/// each closed label set in full, zeros included, summed over the other labels.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OutcomeCounts {
    /// Commands received, every type.
    pub received: u64,
    /// Downstream leg outcomes, every transport.
    pub legs: BTreeMap<String, u64>,
    /// Terminal response deliveries by final outcome.
    pub deliveries: BTreeMap<String, u64>,
    /// Notification deliveries by final outcome.
    pub notifications: BTreeMap<String, u64>,
    /// Commands dropped before any leg, by reason.
    pub dropped: BTreeMap<String, u64>,
}

impl Metrics {
    /// Every outcome since start, read from the counters (the same series `/metrics` shows).
    pub fn outcome_counts(&self) -> OutcomeCounts {
        let deliveries =
            |kind: DeliveryKind| by_label(&self.delivery.deliveries, "outcome", Some(("kind", kind.as_label())));
        OutcomeCounts {
            received: total(&self.commands.commands_received),
            legs: by_label(&self.delivery.downstream_requests, "outcome", None),
            deliveries: deliveries(DeliveryKind::Terminal),
            notifications: deliveries(DeliveryKind::Notify),
            dropped: by_label(&self.commands.commands_dropped, "reason", None),
        }
    }
}

/// A counter family's values summed by one label, over the series that carry `only`.
fn by_label(c: &IntCounterVec, label: &str, only: Option<(&str, &str)>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for m in Collector::collect(c).iter().flat_map(|f| f.get_metric()) {
        let labels = m.get_label();
        let keep = only.is_none_or(|(n, v)| labels.iter().any(|l| l.name() == n && l.value() == v));
        if let Some(value) = labels.iter().find(|l| l.name() == label).map(|l| l.value()) {
            if keep {
                *counts.entry(value.to_owned()).or_insert(0) += m.get_counter().get_value() as u64;
            }
        }
    }
    counts
}

/// The sum of every series of a counter family.
fn total(c: &IntCounterVec) -> u64 {
    Collector::collect(c)
        .iter()
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// The final tally of commands (logged when a run ends).
#[derive(Clone, Debug, PartialEq)]
pub struct Accounting {
    pub received: u64,
    /// Downstream legs, every transport and outcome.
    pub legs: u64,
    pub dropped: Vec<(&'static str, u64)>,
    /// Terminal deliveries by outcome.
    pub terminal: Vec<(String, u64)>,
}

impl Accounting {
    /// Every command is one leg or one drop.
    pub fn balances(&self) -> bool {
        self.received == self.legs + self.dropped.iter().map(|(_, n)| n).sum::<u64>()
    }

    /// `name=count` pairs, space-separated.
    pub fn pairs<N: AsRef<str>>(counts: &[(N, u64)]) -> String {
        counts
            .iter()
            .map(|(name, n)| format!("{}={n}", name.as_ref()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Health receipts: when each channel last carried a command and last succeeded, and
/// when the control plane last acknowledged a delivery (Unix seconds, 0 for never).
struct HealthReceiptFamilies {
    channel_last_command: GaugeVec,
    channel_last_success: GaugeVec,
    last_acked_delivery: Gauge,
}

impl HealthReceiptFamilies {
    fn register(r: &Registry) -> Self {
        let channel_gauge = |name: &str, help: &str| {
            let g = GaugeVec::new(Opts::new(format!("tunnelgate_{name}"), help), &["channel"]);
            registered(r, g.expect("metric definitions are valid"))
        };
        Self {
            channel_last_command: channel_gauge(
                "channel_last_command_timestamp_seconds",
                "Unix time the last downstream leg on the channel ended, whatever its outcome (0: none yet).",
            ),
            channel_last_success: channel_gauge(
                "channel_last_success_timestamp_seconds",
                "Unix time of the channel's last leg answered and acknowledged by the control plane (0: none yet).",
            ),
            last_acked_delivery: gauge(
                r,
                "last_acked_delivery_timestamp_seconds",
                "Unix time of the last delivery the control plane acknowledged (0: none yet).",
            ),
        }
    }
}

impl Metrics {
    /// Creates the per-channel receipt series at zero, one per configured channel (every
    /// transport), so that each exists from the first scrape.
    pub fn channel_receipts_at_zero(&self, channels: &[String]) {
        for ch in channels {
            self.health_receipts.channel_last_command.with_label_values(&[ch]);
            self.health_receipts.channel_last_success.with_label_values(&[ch]);
        }
    }
    /// A downstream leg on `channel` ended at `unix_seconds`.
    pub fn channel_commanded_at(&self, channel: &str, unix_seconds: f64) {
        self.health_receipts
            .channel_last_command
            .with_label_values(&[channel])
            .set(unix_seconds);
    }
    /// A leg on `channel` was answered and its response acknowledged at `unix_seconds`.
    pub fn channel_succeeded_at(&self, channel: &str, unix_seconds: f64) {
        self.health_receipts
            .channel_last_success
            .with_label_values(&[channel])
            .set(unix_seconds);
    }
    /// The control plane acknowledged a delivery at `unix_seconds`.
    pub fn delivery_acked_at(&self, unix_seconds: f64) {
        self.health_receipts.last_acked_delivery.set(unix_seconds);
    }
}

#[cfg(test)]
mod tests;
