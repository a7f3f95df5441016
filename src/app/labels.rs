//! Which enum fills each metric label whose values are owned above `telemetry`.
//!
//! `telemetry` is the ground floor and imports none of these modules; the wiring names
//! them here once, and [`Metrics::new`](crate::telemetry::Metrics::new) creates their
//! series at zero from each enum's `ALL`.

use crate::control::{AttemptResult, Delivery, PollErrorKind};
use crate::downstream::{LegOutcome, TransportKind};
use crate::strict::FatalCategory;
use crate::telemetry::LabelSets;

/// The gateway's label sets.
pub(crate) struct GatewayLabels;

impl LabelSets for GatewayLabels {
    type PollErrorKind = PollErrorKind;
    type Transport = TransportKind;
    type LegOutcome = LegOutcome;
    type Delivery = Delivery;
    type AttemptResult = AttemptResult;
    type FatalCategory = FatalCategory;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{labels, DeliveryKind, LegOutcomeLabel, Metrics, TransportLabel};

    #[test]
    fn upstairs_label_values_are_the_documented_ones() {
        assert_eq!(
            labels::<PollErrorKind>(),
            [
                "timeout",
                "transport",
                "unauthorized",
                "rate_limited",
                "server_error",
                "client_error",
                "decode",
                "local_exhaustion",
                "wrong_cluster"
            ]
        );
        assert_eq!(labels::<TransportKind>(), ["http", "stdio", "builtin"]);
        assert_eq!(labels::<LegOutcome>(), ["not_sent", "answered", "abandoned"]);
        assert_eq!(labels::<Delivery>(), ["acked", "not_found", "rejected", "ambiguous"]);
        assert_eq!(
            labels::<AttemptResult>(),
            [
                "ok",
                "not_found",
                "retryable_status",
                "rejected_status",
                "transport_not_sent",
                "local_exhaustion",
                "transport_after_write",
                "timeout",
                "cancelled"
            ]
        );
        assert_eq!(
            labels::<FatalCategory>(),
            [
                "ack_timeout",
                "ack_connection_lost",
                "ack_not_found",
                "ack_rejected",
                "ack_retries_exhausted",
                "deadline_expired",
                "stopped_before_ack",
                "downstream_ambiguous",
                "internal_error",
                "latched_previously",
                "interrupted_before_ack",
                "local_exhaustion"
            ]
        );
    }

    /// Whether `T` carries a marker trait, asked of a concrete type: the inherent
    /// constant applies only where its bound holds; elsewhere the trait's `false` does.
    struct Probe<T>(std::marker::PhantomData<T>);
    trait Otherwise {
        const TRANSPORT: bool = false;
        const LEG_OUTCOME: bool = false;
    }
    impl<T> Otherwise for Probe<T> {}
    impl<T: TransportLabel> Probe<T> {
        const TRANSPORT: bool = true;
    }
    impl<T: LegOutcomeLabel> Probe<T> {
        const LEG_OUTCOME: bool = true;
    }

    /// [`Metrics::downstream_finished`] takes the transport, then the leg's outcome: the
    /// coercion below builds only while its signature takes them in that order, and the
    /// swapped call does not build because neither enum carries the other's marker. Both
    /// are checked as the test builds (the marker checks in a `const` block).
    #[test]
    fn downstream_finished_takes_the_transport_then_the_outcome_and_not_the_other_way_round() {
        let in_order: fn(&Metrics, TransportKind, LegOutcome) = Metrics::downstream_finished;
        let m = Metrics::new::<GatewayLabels>(false, &[]);
        in_order(&m, TransportKind::Http, LegOutcome::Answered);
        assert!(m
            .render()
            .contains("tunnelgate_downstream_requests_total{outcome=\"answered\",transport=\"http\"} 1"));

        const {
            assert!(Probe::<TransportKind>::TRANSPORT && Probe::<LegOutcome>::LEG_OUTCOME);
            assert!(
                !Probe::<LegOutcome>::TRANSPORT,
                "LegOutcome is a transport label: a swapped downstream_finished builds"
            );
            assert!(
                !Probe::<TransportKind>::LEG_OUTCOME,
                "TransportKind is a leg outcome label: a swapped downstream_finished builds"
            );
        }
    }

    #[test]
    fn alerting_series_exist_at_zero_from_startup() {
        let m = Metrics::new::<GatewayLabels>(true, &["main".to_owned()]);
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
        assert!(
            !text.contains("tunnelgate_fatal_info"),
            "fatal_info has no series until the latch"
        );
    }

    #[test]
    fn intent_methods_move_the_right_series() {
        let m = Metrics::new::<GatewayLabels>(false, &[]);
        m.fatal_latched(FatalCategory::AckNotFound);
        m.fatal_info(FatalCategory::AckNotFound);
        m.delivery_finished(DeliveryKind::Terminal, Delivery::NotFound);
        m.delivery_attempted(DeliveryKind::Terminal, AttemptResult::NotFound);
        m.downstream_finished(TransportKind::Stdio, LegOutcome::Abandoned);
        m.poll_failed(PollErrorKind::RateLimited);
        let text = m.render();
        assert!(text.contains("tunnelgate_fatal_latches_total{category=\"ack_not_found\"} 1"));
        assert!(text.contains("tunnelgate_fatal_latched 1"));
        assert!(text.contains("tunnelgate_fatal_info{category=\"ack_not_found\"} 1"));
        assert!(text.contains("tunnelgate_deliveries_total{kind=\"terminal\",outcome=\"not_found\"} 1"));
        assert!(text.contains("tunnelgate_delivery_attempts_total{kind=\"terminal\",result=\"not_found\"} 1"));
        assert!(text.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"stdio\"} 1"));
        assert!(text.contains("tunnelgate_poll_errors_total{kind=\"rate_limited\"} 1"));
        assert!(text.contains("tunnelgate_polls_total{result=\"error\"} 1"));
    }
}
