//! An admitted `oauth_discovery`: its bound, its downstream step (the transport's
//! discovery), and its one answer, walking the same states of `decide` as a leg.
//!
//! For the fence, discovery is never a dispatch. Its requests are metadata reads (`GET`)
//! and the empty-body `WWW-Authenticate` probe, none of which can carry a JSON-RPC
//! request or act on the MCP server; so it enters the lifecycle as `not_sent`, writes no
//! write-ahead intent, and nothing about it latches: a failed discovery, a stop during
//! it, or an unacknowledged answer is reported, never fatal. It still needs the
//! admission (strict mode holds every downstream interaction to one at a time, and a
//! latched or stopping fence refuses each of its requests).

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::admission::is_expired;
use super::answer::discovery_failed_reply;
use super::command::{CommandTask, Work};
use super::decide::{AfterDelivery, AfterLeg};
use super::observe::{Answer, Stage, Step};
use super::trace;
use crate::downstream::{Discovered, LegOutcome};
use crate::protocol::DiscoveryFailure;
use crate::strict::{Admission, FenceLeg};

/// The gateway's own bound on one whole discovery. The official client bounds only its
/// startup discovery (by 5 s); on the command path a silent server holds it until the
/// command's `response_timeout`, or for ever.
pub(super) const DISCOVERY_BOUND: Duration = Duration::from_secs(5);
/// The part of a command's remaining budget kept for posting the answer: a quarter, at
/// most this much.
const POST_RESERVE_MAX: Duration = Duration::from_secs(1);

impl CommandTask<'_> {
    /// The admitted discovery: run it (bounded), then post its answer, a document or an
    /// error. The admission is released when this returns.
    pub(super) async fn discovered(&self, admission: Admission) {
        let Some(running) = self.start_running(Work::Discovery) else {
            return;
        };
        let started = Instant::now();
        let (result, cut) = self
            .discover(&admission, discovery_deadline(started, self.deadline))
            .await;
        self.obs.observe(Step::Discovered {
            result: result.as_ref().map(|found| found.reply.resp_code).map_err(|f| *f),
            since: started,
        });
        let reply = match result {
            Ok(found) => {
                self.register_harpoon_targets(&admission, &found).await;
                found.reply
            }
            Err(failure) => discovery_failed_reply(self.cmd, failure),
        };
        match running.leg_ended(LegOutcome::NotSent, cut, is_expired(self.deadline)) {
            AfterLeg::Deliver { within_cleanup, next } => {
                admission.set_leg(FenceLeg::Deliver);
                let since = Instant::now();
                let report = self.post_terminal(&reply, within_cleanup).await;
                self.obs.observe(Step::Delivered {
                    report: &report,
                    answer: Answer::Discovery { since },
                });
                let after = next.delivered(
                    report.delivery,
                    report.last_attempt,
                    report.refused,
                    is_expired(self.deadline),
                );
                match after {
                    AfterDelivery::Done => {}
                    // `not_sent` never latches on its delivery; kept exact all the same.
                    AfterDelivery::Latch(category) | AfterDelivery::LatchThenTellTooLarge(category) => {
                        self.latch(&admission, category)
                    }
                    // Only an `answered` leg's answer is replaced; discovery is `not_sent`.
                    AfterDelivery::Report | AfterDelivery::TellTooLarge => self.obs.observe(Step::NotAcknowledged {
                        report: &report,
                        stage: Stage::Discovery,
                    }),
                }
            }
            AfterLeg::Silent => self.obs.observe(Step::Silent(Stage::Discovery)),
            // `not_sent` never latches after its step either.
            AfterLeg::Latch(category) | AfterLeg::LatchThenTell(category) => self.latch(&admission, category),
        }
    }

    /// Channel `harpoon`'s targets from the document found, registered before the answer
    /// is posted (so the service never asks for a label that is not there yet), bounded
    /// as a discovery is.
    async fn register_harpoon_targets(&self, admission: &Admission, found: &Discovered) {
        let (Some(harpoon), Some(url), Some(doc)) = (
            self.d.gate.channels.harpoon(),
            self.transport.url(),
            found.reply.resp_json.as_deref(),
        ) else {
            return;
        };
        if self.cmd.channel.as_str() != "main" {
            return;
        }
        let deadline = discovery_deadline(Instant::now(), self.deadline);
        harpoon
            .register_discovery(admission, url, Some(&found.source), doc, deadline)
            .await;
    }

    /// The transport's discovery in the downstream span, cut short by the stop; returns
    /// its result and whether the stop cut it.
    async fn discover(&self, admission: &Admission, deadline: Instant) -> (Result<Discovered, DiscoveryFailure>, bool) {
        let span = trace::downstream_span(self.cmd, self.transport);
        let discovery = self.transport.discover(admission, deadline).instrument(span.clone());
        let (result, cut) = tokio::select! {
            biased;
            // cancel-safe: discovery only reads; dropping it loses nothing but its answer.
            () = self.d.legs.cut.cancelled() => (Err(DiscoveryFailure::NotExecuted), true),
            result = discovery => (result, false),
        };
        if let Err(failure) = &result {
            trace::record_discovery_failed(&span, *failure);
        }
        (result, cut)
    }
}

/// When a discovery started at `now` must end: by [`DISCOVERY_BOUND`], and before the
/// command's deadline by the time kept for posting the answer.
pub(super) fn discovery_deadline(now: Instant, command_deadline: Option<Instant>) -> Instant {
    let own = now + DISCOVERY_BOUND;
    let Some(deadline) = command_deadline else {
        return own;
    };
    let remaining = deadline.saturating_duration_since(now);
    let reserve = (remaining / 4).min(POST_RESERVE_MAX);
    own.min(deadline - reserve)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_discovery_steps_are_logged_under_this_modules_own_target() {
        assert_eq!(
            Some(super::super::observe::LOG_DISCOVER),
            module_path!().strip_suffix("::tests")
        );
    }

    #[test]
    fn discovery_ends_by_its_own_bound_or_before_the_deadline_with_time_to_post() {
        let now = Instant::now();
        assert_eq!(discovery_deadline(now, None), now + DISCOVERY_BOUND);
        assert_eq!(
            discovery_deadline(now, Some(now + Duration::from_secs(60))),
            now + DISCOVERY_BOUND
        );
        // 2 s left: a quarter (500 ms) is kept for the post.
        assert_eq!(
            discovery_deadline(now, Some(now + Duration::from_secs(2))),
            now + Duration::from_millis(1500)
        );
        // 5.2 s left: the reserve is capped at 1 s.
        assert_eq!(
            discovery_deadline(now, Some(now + Duration::from_millis(5200))),
            now + Duration::from_millis(4200)
        );
        // Already past: ends now (or before), never after the deadline.
        assert!(discovery_deadline(now, Some(now)) <= now);
    }
}
