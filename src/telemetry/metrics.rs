//! Every metric tunnelgate exports, declared once (names and labels are API).
//!
//! Core code calls intent-named methods; nothing else touches the registry. Label values
//! are closed sets, never ids or payload text: each comes from an enum implementing
//! [`LabelValue`] (see [`super::label`]). Every labelled series that alerts use is
//! created at zero at startup.

use std::any::{type_name, TypeId};

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use super::label::{
    CommandType, DeliveryKind, DropReason, DurationLeg, LabelSets, LabelValue, PollResult, TaskKind, TraceContextSource,
};

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
    fatal_info: IntGaugeVec,
    commands_in_flight: IntGauge,
    queue_depth: IntGauge,
    stdio_up: IntGaugeVec,
    stdio_restarts: IntCounterVec,
    stdio_late_responses: IntCounterVec,
    stdout_garbage: IntCounter,
    task_failures: IntCounterVec,
    trace_context_invalid: IntCounterVec,
    label_types: LabelTypes,
}

/// The enum each upstairs label takes (from the [`LabelSets`] given to `new`).
struct LabelTypes {
    poll_error_kind: TypeId,
    transport: TypeId,
    leg_outcome: TypeId,
    delivery: TypeId,
    attempt_result: TypeId,
    fatal_category: TypeId,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(format!("tunnelgate_{name}"), help), labels)
        .expect("metric definitions are valid");
    r.register(Box::new(c.clone())).expect("each metric is registered once");
    c
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g =
        IntGaugeVec::new(Opts::new(format!("tunnelgate_{name}"), help), labels).expect("metric definitions are valid");
    r.register(Box::new(g.clone())).expect("each metric is registered once");
    g
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(format!("tunnelgate_{name}"), help).expect("metric definitions are valid");
    r.register(Box::new(g.clone())).expect("each metric is registered once");
    g
}

/// The label values of `T`, in declaration order.
fn all<T: LabelValue>() -> impl Iterator<Item = &'static str> {
    T::ALL.iter().map(|v| v.as_label())
}

/// `value`'s label; debug builds check `T` is the enum registered for this label.
fn label<T: LabelValue>(value: T, registered: TypeId) -> &'static str {
    debug_assert!(
        TypeId::of::<T>() == registered,
        "{} is not the enum registered for this label",
        type_name::<T>()
    );
    value.as_label()
}

impl Metrics {
    /// Registers every metric and creates the alerting series at zero: every value of
    /// every closed label set (`L` names the upstairs ones), and each configured stdio
    /// channel.
    pub fn new<L: LabelSets>(strict: bool, stdio_channels: &[String]) -> Self {
        let r = Registry::new();
        let build = gauge_vec(&r, "build_info", "Build information; always 1.", &["version"]);
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
        let fatal_info = gauge_vec(
            &r,
            "fatal_info",
            "1 for the category of the fatal latch; no series while not latched.",
            &["category"],
        );
        let commands_in_flight = int_gauge(&r, "commands_in_flight", "Commands admitted and not yet finished.");
        let queue_depth = int_gauge(&r, "queue_depth", "Commands received and waiting for a worker.");
        let stdio_up = gauge_vec(&r, "stdio_up", "1 while the channel's stdio child runs.", &["channel"]);
        let stdio_restarts = counter_vec(
            &r,
            "stdio_restarts_total",
            "Stdio child restarts by channel.",
            &["channel"],
        );
        let stdio_late_responses = counter_vec(
            &r,
            "stdio_late_responses_total",
            "Responses a stdio child sent for a request already retired (discarded), by channel.",
            &["channel"],
        );
        let stdout_garbage = IntCounter::new(
            "tunnelgate_stdio_stdout_invalid_lines_total",
            "Non-JSON lines a stdio child printed on stdout (skipped).",
        )
        .expect("metric definitions are valid");
        r.register(Box::new(stdout_garbage.clone())).expect("registered once");
        let task_failures = counter_vec(
            &r,
            "task_failures_total",
            "Gateway tasks that ended unexpectedly (panic or error), by task.",
            &["task"],
        );

        let trace_context_invalid = counter_vec(
            &r,
            "trace_context_invalid_total",
            "Malformed W3C trace context in commands (ignored), by where it was found.",
            &["source"],
        );

        for v in all::<PollResult>() {
            polls.with_label_values(&[v]);
        }
        for v in all::<L::PollErrorKind>() {
            poll_errors.with_label_values(&[v]);
        }
        for v in all::<CommandType>() {
            commands_received.with_label_values(&[v]);
        }
        for v in all::<DropReason>() {
            commands_dropped.with_label_values(&[v]);
        }
        for t in all::<L::Transport>() {
            for o in all::<L::LegOutcome>() {
                downstream_requests.with_label_values(&[t, o]);
            }
        }
        for k in all::<DeliveryKind>() {
            for o in all::<L::Delivery>() {
                deliveries.with_label_values(&[k, o]);
            }
            for a in all::<L::AttemptResult>() {
                delivery_attempts.with_label_values(&[k, a]);
            }
        }
        for c in all::<L::FatalCategory>() {
            fatal_latches.with_label_values(&[c]);
        }
        for ch in stdio_channels {
            stdio_up.with_label_values(&[ch]);
            stdio_restarts.with_label_values(&[ch]);
            stdio_late_responses.with_label_values(&[ch]);
        }
        for t in all::<TaskKind>() {
            task_failures.with_label_values(&[t]);
        }
        for s in all::<TraceContextSource>() {
            trace_context_invalid.with_label_values(&[s]);
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
            fatal_info,
            commands_in_flight,
            queue_depth,
            stdio_up,
            stdio_restarts,
            stdio_late_responses,
            stdout_garbage,
            task_failures,
            trace_context_invalid,
            label_types: LabelTypes {
                poll_error_kind: TypeId::of::<L::PollErrorKind>(),
                transport: TypeId::of::<L::Transport>(),
                leg_outcome: TypeId::of::<L::LegOutcome>(),
                delivery: TypeId::of::<L::Delivery>(),
                attempt_result: TypeId::of::<L::AttemptResult>(),
                fatal_category: TypeId::of::<L::FatalCategory>(),
            },
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

    pub fn poll_finished(&self, result: PollResult) {
        self.polls.with_label_values(&[result.as_label()]).inc();
    }
    pub fn poll_failed(&self, kind: impl LabelValue) {
        let kind = label(kind, self.label_types.poll_error_kind);
        self.polls.with_label_values(&[PollResult::Error.as_label()]).inc();
        self.poll_errors.with_label_values(&[kind]).inc();
    }
    pub fn poll_succeeded_at(&self, unix_seconds: f64) {
        self.last_successful_poll.set(unix_seconds);
    }
    pub fn command_received(&self, command_type: CommandType) {
        self.commands_received
            .with_label_values(&[command_type.as_label()])
            .inc();
    }
    pub fn command_dropped(&self, reason: DropReason) {
        self.commands_dropped.with_label_values(&[reason.as_label()]).inc();
    }
    pub fn downstream_finished(&self, transport: impl LabelValue, outcome: impl LabelValue) {
        let transport = label(transport, self.label_types.transport);
        let outcome = label(outcome, self.label_types.leg_outcome);
        self.downstream_requests.with_label_values(&[transport, outcome]).inc();
    }
    pub fn delivery_finished(&self, kind: DeliveryKind, outcome: impl LabelValue) {
        let outcome = label(outcome, self.label_types.delivery);
        self.deliveries.with_label_values(&[kind.as_label(), outcome]).inc();
    }
    pub fn delivery_attempted(&self, kind: DeliveryKind, result: impl LabelValue) {
        let result = label(result, self.label_types.attempt_result);
        self.delivery_attempts
            .with_label_values(&[kind.as_label(), result])
            .inc();
    }
    pub fn leg_duration(&self, leg: DurationLeg, seconds: f64) {
        self.command_duration
            .with_label_values(&[leg.as_label()])
            .observe(seconds);
    }
    pub fn set_fence_held(&self, held: bool) {
        self.fence_held.set(i64::from(held));
    }
    pub fn fatal_latched(&self, category: impl LabelValue) {
        let category = label(category, self.label_types.fatal_category);
        self.fatal_latched.set(1);
        self.fatal_latches.with_label_values(&[category]).inc();
        self.fatal_info.reset();
        self.fatal_info.with_label_values(&[category]).set(1);
    }
    /// Sets `fatal_info{category}` to 1 for the latch's category, the only series of
    /// that metric (none exists until the latch is set).
    pub fn fatal_info(&self, category: impl LabelValue) {
        let category = label(category, self.label_types.fatal_category);
        self.fatal_info.reset();
        self.fatal_info.with_label_values(&[category]).set(1);
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
    /// A stdio child answered a request that was already retired; the answer was discarded.
    pub fn stdio_late_response(&self, channel: &str) {
        self.stdio_late_responses.with_label_values(&[channel]).inc();
    }
    pub fn stdio_invalid_line(&self) {
        self.stdout_garbage.inc();
    }
    /// A gateway task ended unexpectedly (a panic, or an error it could not handle).
    pub fn task_failed(&self, task: TaskKind) {
        self.task_failures.with_label_values(&[task.as_label()]).inc();
    }

    /// A command carried a trace context that is not valid W3C: ignored, counted here.
    pub fn trace_context_invalid(&self, source: TraceContextSource) {
        self.trace_context_invalid.with_label_values(&[source.as_label()]).inc();
    }

    /// Where every received command went, from the counters: each one ends in exactly
    /// one downstream leg outcome or one drop reason.
    pub fn accounting(&self) -> Accounting {
        let dropped = DropReason::ALL
            .iter()
            .map(|r| {
                (
                    r.as_label(),
                    self.commands_dropped.with_label_values(&[r.as_label()]).get(),
                )
            })
            .collect();
        let mut terminal = Vec::new();
        for m in prometheus::core::Collector::collect(&self.deliveries)
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
            received: total(&self.commands_received),
            legs: total(&self.downstream_requests),
            dropped,
            terminal,
        }
    }
}

/// The sum of every series of a counter family.
fn total(c: &IntCounterVec) -> u64 {
    prometheus::core::Collector::collect(c)
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

#[cfg(test)]
mod tests;
