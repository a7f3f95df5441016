//! Reading the counters back: where every received command went ([`Accounting`], logged
//! when a run ends) and every outcome since start ([`OutcomeCounts`], `/status`
//! `outcomes`), from the same series `/metrics` shows.
//!
//! Invariant: every received command ends in exactly one downstream leg outcome or one
//! drop reason ([`Accounting::balances`]). Reads only; nothing here moves a series.

use std::collections::BTreeMap;

use prometheus::core::Collector;
use prometheus::IntCounterVec;

use super::Metrics;
use crate::telemetry::label::{DeliveryKind, DropReason, LabelValue};

impl Metrics {
    /// Where every received command went, from the counters: each one ends in exactly
    /// one downstream leg outcome or one drop reason.
    pub(crate) fn accounting(&self) -> Accounting {
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
    pub(crate) fn outcome_counts(&self) -> OutcomeCounts {
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
