//! stdio children, per configured channel: whether each runs with its session open,
//! restarts, late responses, the gateway's own handshakes by how each ended, and the
//! invalid lines children printed on stdout.
//!
//! The `channel` label takes only configured channel names; each configured stdio
//! channel has its series from startup (at zero).

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Registry};

use super::{all, counter_vec, gauge_vec, int_counter, Metrics};
use crate::telemetry::label::{ContinuationRefusal, EraHandling, EraHeldEnd, LabelValue, SessionResult};

/// stdio children, per configured channel.
pub(super) struct StdioFamilies {
    stdio_up: IntGaugeVec,
    stdio_restarts: IntCounterVec,
    stdio_late_responses: IntCounterVec,
    stdio_sessions: IntCounterVec,
    era_requests: IntCounterVec,
    era_parked: IntGaugeVec,
    era_rounds: IntCounterVec,
    era_held: IntCounterVec,
    era_refused: IntCounterVec,
    stdout_garbage: IntCounter,
}

impl StdioFamilies {
    pub(super) fn register(r: &Registry) -> Self {
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
            era_requests: counter_vec(
                r,
                "era_requests_total",
                "2026-07-28 callers' requests on channels whose server may be of the handshake era, by channel and what the era bridge did.",
                &["channel", "handling"],
            ),
            era_parked: gauge_vec(
                r,
                "era_parked_calls",
                "Calls the era bridge holds parked now, each waiting for its caller's retry with input, by channel.",
                &["channel"],
            ),
            era_rounds: counter_vec(
                r,
                "era_input_rounds_total",
                "Times a handshake-era server asked for input during a held call and the caller was answered input_required, by channel.",
                &["channel"],
            ),
            era_held: counter_vec(
                r,
                "era_held_calls_total",
                "Calls the era bridge held across input rounds, by channel and how each ended.",
                &["channel", "end"],
            ),
            era_refused: counter_vec(
                r,
                "era_continuations_refused_total",
                "Retries with a requestState whose held call was gone, refused with nothing sent, by channel and reason.",
                &["channel", "reason"],
            ),
            stdout_garbage: int_counter(
                r,
                "stdio_stdout_invalid_lines_total",
                "Non-JSON lines a stdio child printed on stdout (skipped).",
            ),
        }
    }

    /// Each configured stdio channel's series, every handshake result included, at zero.
    pub(super) fn series_at_zero(&self, stdio_channels: &[String]) {
        for ch in stdio_channels {
            self.stdio_up.with_label_values(&[ch]);
            self.stdio_restarts.with_label_values(&[ch]);
            self.stdio_late_responses.with_label_values(&[ch]);
            for result in all::<SessionResult>() {
                self.stdio_sessions.with_label_values(&[ch, result]);
            }
        }
        self.era_series_at_zero(stdio_channels);
    }

    /// The era bridge's series of each channel (stdio or HTTP), at zero.
    pub(super) fn era_series_at_zero(&self, channels: &[String]) {
        for ch in channels {
            for handling in all::<EraHandling>() {
                self.era_requests.with_label_values(&[ch, handling]);
            }
            self.era_parked.with_label_values(&[ch]);
            self.era_rounds.with_label_values(&[ch]);
            for end in all::<EraHeldEnd>() {
                self.era_held.with_label_values(&[ch, end]);
            }
            for reason in all::<ContinuationRefusal>() {
                self.era_refused.with_label_values(&[ch, reason]);
            }
        }
    }
}

impl Metrics {
    /// The era bridge's series of the HTTP channels `channels`, at zero (a stdio
    /// channel's are created with the rest of its series).
    pub(crate) fn era_channels_at_zero(&self, channels: &[String]) {
        self.stdio.era_series_at_zero(channels);
    }

    pub(crate) fn stdio_up(&self, channel: &str, up: bool) {
        self.stdio.stdio_up.with_label_values(&[channel]).set(i64::from(up));
    }
    pub(crate) fn stdio_restarted(&self, channel: &str) {
        self.stdio.stdio_restarts.with_label_values(&[channel]).inc();
    }
    /// A stdio child answered a request that was already retired; the answer was discarded.
    pub(crate) fn stdio_late_response(&self, channel: &str) {
        self.stdio.stdio_late_responses.with_label_values(&[channel]).inc();
    }
    /// The gateway's handshake with a stdio child of `channel` ended with `result`.
    pub(crate) fn stdio_session(&self, channel: &str, result: SessionResult) {
        self.stdio
            .stdio_sessions
            .with_label_values(&[channel, result.as_label()])
            .inc();
    }
    /// The era bridge handled a 2026-07-28 caller's request on `channel` as `handling`.
    pub(crate) fn era_request(&self, channel: &str, handling: EraHandling) {
        self.stdio
            .era_requests
            .with_label_values(&[channel, handling.as_label()])
            .inc();
    }
    /// A held call of `channel` parked (`+1`) or left its park (`-1`).
    pub(crate) fn era_parked(&self, channel: &str, delta: i64) {
        self.stdio.era_parked.with_label_values(&[channel]).add(delta);
    }
    /// A held call's server asked for input; its caller was answered `input_required`.
    pub(crate) fn era_round(&self, channel: &str) {
        self.stdio.era_rounds.with_label_values(&[channel]).inc();
    }
    /// A held call of `channel` ended as `end`.
    pub(crate) fn era_held_ended(&self, channel: &str, end: EraHeldEnd) {
        self.stdio.era_held.with_label_values(&[channel, end.as_label()]).inc();
    }
    /// A retry whose held call was gone was refused for `reason`.
    pub(crate) fn era_continuation_refused(&self, channel: &str, reason: ContinuationRefusal) {
        self.stdio
            .era_refused
            .with_label_values(&[channel, reason.as_label()])
            .inc();
    }
    pub(crate) fn stdio_invalid_line(&self) {
        self.stdio.stdout_garbage.inc();
    }
}
