//! Every metric tunnelgate exports, declared once (names and labels are API).
//!
//! Core code calls intent-named methods; nothing else touches the registry. Label values
//! are closed sets, never ids or payload text: each comes from an enum implementing
//! [`LabelValue`] (see [`super::label`]), and a label filled from upstairs takes only the
//! enum that owns it. Every labelled series that alerts use is created at zero at startup.
//!
//! One room per family of metrics, each declaring its metrics (name, help, labels),
//! creating its series at zero and offering the intent-named methods that move them:
//! `poll`, `commands`, `delivery`, `strict`, `stdio`, `internals`, `receipts`,
//! `health_receipts`, `coordination`, `harpoon` (channel `harpoon`'s calls, refusals and
//! registrations), `oauth` (discovery's trust gate for metadata origins) and `probes`
//! (liveness and readiness); `accounting` reads the counters back. This module holds the
//! registry, the registration helpers every room uses, and the order of registration and
//! zero series.

mod accounting;
mod commands;
mod coordination;
mod delivery;
mod harpoon;
mod health_receipts;
mod internals;
mod oauth;
mod poll;
mod probes;
mod receipts;
mod stdio;
mod strict;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub use self::accounting::Accounting;
pub(crate) use self::accounting::OutcomeCounts;
use self::commands::CommandFamilies;
use self::coordination::CoordinationFamilies;
use self::delivery::DeliveryFamilies;
use self::harpoon::HarpoonFamilies;
pub(crate) use self::harpoon::{
    HarpoonCallOutcome, HarpoonRefusalReason, HarpoonRegistrationResult, HarpoonStatusClass, HARPOON_UNKNOWN_LABEL,
};
use self::health_receipts::HealthReceiptFamilies;
use self::internals::InternalFamilies;
use self::oauth::OAuthFamilies;
use self::poll::PollFamilies;
use self::probes::ProbeFamilies;
use self::receipts::ReceiptFamilies;
use self::stdio::StdioFamilies;
use self::strict::StrictFamilies;
use super::label::{LabelSets, LabelValue};

/// The metric set. Cheap to clone handles live inside; share it behind an `Arc`.
///
/// Each label takes the one enum that owns it, checked by the compiler: swapped
/// arguments do not build. `metrics.downstream_finished(TransportKind::Http,
/// LegOutcome::Answered)` builds and `metrics.downstream_finished(LegOutcome::Answered,
/// TransportKind::Http)` does not (E0277); the tests of `app::labels` hold both with the
/// real enums (the method coerced to `fn(&Metrics, TransportKind, LegOutcome)`, and
/// neither enum carrying the other's marker trait).
pub struct Metrics {
    registry: Registry,
    poll: PollFamilies,
    commands: CommandFamilies,
    delivery: DeliveryFamilies,
    strict: StrictFamilies,
    stdio: StdioFamilies,
    internals: InternalFamilies,
    receipts: ReceiptFamilies,
    oauth: OAuthFamilies,
    health_receipts: HealthReceiptFamilies,
    coordination: CoordinationFamilies,
    harpoon: HarpoonFamilies,
    probes: ProbeFamilies,
}

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

impl Metrics {
    /// Registers every metric and creates the alerting series at zero: every value of
    /// every closed label set (`L` names the upstairs ones), and each configured stdio
    /// channel.
    pub(crate) fn new<L: LabelSets>(strict: bool, stdio_channels: &[String]) -> Self {
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
            oauth: OAuthFamilies::register(&r),
            health_receipts: HealthReceiptFamilies::register(&r),
            coordination: CoordinationFamilies::register(&r),
            harpoon: HarpoonFamilies::register(&r),
            probes: ProbeFamilies::register(&r),
            registry: r,
        }
    }

    /// The series alerts and the dashboard use, at zero before anything happens: every
    /// value of every closed label set (the latency histogram's `leg` included, each with
    /// its buckets at zero; `fatal_info` excepted: it has a series only once latched), and
    /// each configured stdio channel.
    fn create_series_at_zero<L: LabelSets>(&self, stdio_channels: &[String]) {
        self.poll.series_at_zero::<L>();
        self.commands.series_at_zero();
        self.delivery.series_at_zero::<L>();
        self.strict.series_at_zero::<L>();
        self.stdio.series_at_zero(stdio_channels);
        self.internals.series_at_zero();
        self.receipts.series_at_zero();
        self.oauth.series_at_zero();
        self.harpoon.series_at_zero();
    }

    /// Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding of gathered metrics cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }
}

#[cfg(test)]
mod tests;
