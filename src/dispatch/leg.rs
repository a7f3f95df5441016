//! A command's downstream leg as it runs: the request to the MCP server, the server's
//! notifications posted in order while it runs, the server's questions registered for
//! the caller's replies, those replies carried on the same leg, and the stop's cut.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::answer::body;
use super::observe::{observe_aside, Aside, LegOf, Observer, Step};
use super::replies::{server_request, ReplyJob, ReplyKey, ServerRequests};
use super::{trace, Dispatcher, Propagation};
use crate::control::{Delivery, PostKind};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, Notification, Reply, Transport};
use crate::protocol::{message_method, Command, CommandKind, RespType, WireHeaders};
use crate::strict::Admission;
use crate::supervisor::{TaskEnd, TaskKind};
use crate::telemetry::attrs;

/// Notifications buffered between a transport and the control plane.
const NOTIFY_BUFFER: usize = 64;

/// Replies queued for one leg at once.
const REPLY_BUFFER: usize = 16;

/// A server request unanswered this long is logged at `warn` (once).
const SERVER_REQUEST_WARN_AFTER: Duration = Duration::from_secs(10);
/// How often a running leg looks for server requests waiting too long on the caller.
const SERVER_REQUEST_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What running legs share.
pub(crate) struct Legs {
    /// Cancelled when the stop cuts downstream legs short (grace over, second stop
    /// request, or latched cleanup over): each is answered within the cleanup time.
    pub(super) cut: CancellationToken,
    /// Server requests in flight, for the replies that belong to them.
    pub(super) requests: ServerRequests,
    /// Names each admitted leg, as the owner of its server requests.
    next_owner: AtomicU64,
    /// Where the gateway's trace context is handed on to MCP servers.
    pub(super) propagation: Propagation,
}

/// What the notifier needs to register the server's questions for the leg's replies.
struct Questions {
    owner: u64,
    headers: WireHeaders,
    jobs: mpsc::Sender<ReplyJob>,
}

impl Legs {
    pub(crate) fn new(cut: CancellationToken, propagation: Propagation) -> Self {
        Self {
            cut,
            requests: ServerRequests::default(),
            next_owner: AtomicU64::new(1),
            propagation,
        }
    }
}

/// One admitted command's downstream leg.
pub(super) struct Leg<'a> {
    pub(super) d: &'a Arc<Dispatcher>,
    pub(super) cmd: &'a Command,
    pub(super) transport: &'a Transport,
    pub(super) deadline: Option<Instant>,
    /// Tells the books, the command's span and its receipt how the leg ended.
    pub(super) obs: &'a Observer<'a>,
}

impl Leg<'_> {
    /// Runs the leg, cut short by the stop, with its notifications posted and its
    /// replies carried; returns how it ended and whether the stop cut it.
    pub(super) async fn run_leg(&self, admission: &Admission) -> (LegResult, bool) {
        let d = self.d;
        // Notifications are posted in order while the leg runs; the server's questions
        // among them are registered first, so their replies find this leg.
        let owner = d.legs.next_owner.fetch_add(1, Ordering::Relaxed);
        let (jobs_tx, jobs_rx) = mpsc::channel::<ReplyJob>(REPLY_BUFFER);
        let (notes_tx, notes_rx) = mpsc::channel(NOTIFY_BUFFER);
        let questions = Questions {
            owner,
            headers: self.cmd.headers.clone(),
            jobs: jobs_tx,
        };
        // Driven inside this command's task (no spawn per command), still supervised as
        // the notifier: a panic there is reported as such and the command goes on.
        let mut notifier = std::pin::pin!(d.supervisor.watched(
            TaskKind::Notifier,
            post_notifications(d.clone(), notes_rx, Ids::of(self.cmd), self.deadline, questions).in_current_span(),
        ));
        let started = Instant::now();
        let leg_future = Box::pin(self.downstream_leg(admission, notes_tx));
        let (leg, cut, notifier_done) = self
            .drive(admission, owner, leg_future, jobs_rx, notifier.as_mut())
            .await;
        self.obs.observe(Step::LegEnded {
            leg: &leg,
            transport: self.transport.kind(),
            since: Some(started),
            of: LegOf::Command,
        });
        // Notifications go out before the terminal response, whatever happens to them. A
        // notifier that panicked was reported by the supervisor.
        if !notifier_done {
            notifier.await;
        }
        // Questions the notifier registered after the leg ended can never be answered.
        d.legs.requests.release(owner);
        (leg, cut)
    }

    /// Polls the leg, the replies it carries and the notifier until the leg ends or the
    /// stop cuts it; returns the leg, whether it was cut, and whether the notifier ended.
    async fn drive(
        &self,
        admission: &Admission,
        owner: u64,
        mut leg_future: std::pin::Pin<Box<impl std::future::Future<Output = LegResult>>>,
        mut jobs: mpsc::Receiver<ReplyJob>,
        mut notifier: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> (LegResult, bool, bool) {
        let d = self.d;
        let mut notifier_done = false;
        let mut replies = FuturesUnordered::new();
        // No timer until the server asks the caller something (see `long_wait_tick`).
        let mut check_waits = None;
        let (leg, cut) = loop {
            tokio::select! {
                biased;
                // cancel-safe: dropping the leg is safe before its request may have left;
                // after that the drop itself is the ambiguity, reported as
                // `CancelledAfterWrite`. Replies in flight are dropped with it.
                () = d.legs.cut.cancelled() => break (cut_leg(self.cmd, admission), true),
                leg = &mut leg_future => break (leg, false),
                // cancel-safe: mpsc receive loses nothing.
                Some(job) = jobs.recv() => replies.push(run_reply_job(self.transport, admission, job, d.legs.propagation)),
                // cancel-safe: a reply in flight stays in the set.
                Some(()) = replies.next(), if !replies.is_empty() => {}
                // cancel-safe: the notifier future is kept and polled again; this branch
                // only marks it finished.
                () = &mut notifier, if !notifier_done => notifier_done = true,
                // cancel-safe: a timer.
                () = long_wait_tick(&mut check_waits, &d.legs.requests, owner) => self.warn_long_waits(owner),
            }
        };
        // The leg is over: nobody can carry a reply to this server any more. Replies
        // already being written finish (each bounded by its own deadline).
        d.legs.requests.release(owner);
        if !cut {
            while replies.next().await.is_some() {}
        }
        // Dropping the leg (cut, or already finished) closes its notification sink, so
        // the notifier ends.
        (leg, cut, notifier_done)
    }

    /// The request itself, in the downstream span.
    async fn downstream_leg(&self, admission: &Admission, notes: mpsc::Sender<Notification>) -> LegResult {
        let (cmd, transport) = (self.cmd, self.transport);
        let span = trace::downstream_span(cmd, transport);
        let payload = match &cmd.kind {
            CommandKind::JsonRpc(p) => Some(p),
            CommandKind::SessionTermination | CommandKind::OAuthDiscovery | CommandKind::Unknown(_) => None,
        };
        let forwarded = trace::forwarded(payload, &cmd.headers, transport, self.d.legs.propagation, &span);
        let headers = forwarded.headers.as_ref().unwrap_or(&cmd.headers);
        let leg = async {
            match &cmd.kind {
                CommandKind::JsonRpc(payload) => {
                    let req = DownstreamRequest {
                        payload: forwarded.payload.as_ref().unwrap_or(payload),
                        headers,
                        deadline: self.deadline,
                    };
                    transport.call(admission, &req, &notes).await
                }
                CommandKind::SessionTermination => transport.terminate_session(admission, headers, self.deadline).await,
                // Never routed to a leg: discovery has a path of its own, and an unknown
                // type is answered or skipped before admission.
                CommandKind::OAuthDiscovery | CommandKind::Unknown(_) => {
                    failed_leg(cmd, LegFailure::InternalBeforeSend)
                }
            }
        }
        .instrument(span.clone())
        .await;
        trace::record_downstream(&span, cmd, &leg);
        leg
    }

    /// Tells of each of `owner`'s server requests that has waited long for the caller's
    /// reply, once.
    fn warn_long_waits(&self, owner: u64) {
        for w in self.d.legs.requests.long_waits(owner, SERVER_REQUEST_WARN_AFTER) {
            self.obs.observe(Step::ServerRequestWaiting {
                method: &w.method,
                waited: w.waited,
            });
        }
    }
}

/// Ticks every [`SERVER_REQUEST_CHECK_EVERY`] once `owner`'s leg has a server request
/// waiting for the caller's reply, the first tick one period after it was seen. Before
/// that it arms no timer: a timer per command, due before anything else the runtime
/// waits for, woke the runtime's driver once per command (an `eventfd` write).
///
/// Polled by `drive`'s `select!` after the notifier, which registers the questions: the
/// pass in which one is registered also arms the timer.
fn long_wait_tick<'a>(
    check: &'a mut Option<tokio::time::Interval>,
    requests: &'a ServerRequests,
    owner: u64,
) -> impl std::future::Future<Output = ()> + 'a {
    std::future::poll_fn(move |cx| {
        if check.is_none() {
            if !requests.has_waiting(owner) {
                return std::task::Poll::Pending;
            }
            let first = Instant::now() + SERVER_REQUEST_CHECK_EVERY;
            *check = Some(tokio::time::interval_at(first, SERVER_REQUEST_CHECK_EVERY));
        }
        match check.as_mut() {
            Some(interval) => interval.poll_tick(cx).map(|_| ()),
            None => std::task::Poll::Pending,
        }
    })
}

/// Runs one reply on the leg that owns the question, with that leg's admission: in strict
/// mode the reply is part of the question's dispatch, not a second one.
async fn run_reply_job(transport: &Transport, admission: &Admission, job: ReplyJob, propagation: Propagation) {
    // A reply is answered `202`: anything the server streams back to it has no caller.
    let (sink, _discard) = mpsc::channel(1);
    let span = tracing::debug_span!(
        "tunnelgate.reply",
        { attrs::OTEL_KIND } = "client",
        { attrs::NETWORK_TRANSPORT } = transport.network_transport(),
    );
    let forwarded = trace::forwarded(Some(&job.payload), &job.headers, transport, propagation, &span);
    let req = DownstreamRequest {
        payload: &job.payload,
        headers: forwarded.headers.as_ref().unwrap_or(&job.headers),
        deadline: job.deadline,
    };
    let result = transport.call(admission, &req, &sink).instrument(span).await;
    let _ = job.done.send(result);
}

/// Who a command's notifications are posted for.
struct Ids {
    request_id: crate::protocol::RequestId,
    channel: crate::protocol::ChannelName,
    shard_token: crate::protocol::ShardToken,
}

impl Ids {
    fn of(cmd: &Command) -> Self {
        Self {
            request_id: cmd.request_id.clone(),
            channel: cmd.channel.clone(),
            shard_token: cmd.shard_token.clone(),
        }
    }
}

/// Posts `jsonrpc_notify` messages in order; after one fails, skips the rest for this
/// command (the terminal response is still delivered). A task of its own, which cannot
/// borrow the command's observer: its steps are told as [`Aside`]s.
async fn post_notifications(
    d: Arc<Dispatcher>,
    mut rx: mpsc::Receiver<Notification>,
    ids: Ids,
    deadline: Option<Instant>,
    questions: Questions,
) -> TaskEnd {
    let mut failed = false;
    let mut skipped = 0u64;
    while let Some(n) = rx.recv().await {
        // A question from the server: registered before the caller can see it.
        if let Some((method, id)) = server_request(&n.resp_json) {
            let registered = ReplyKey::new(ids.channel.as_str(), &questions.headers, &id).is_some_and(|key| {
                d.legs
                    .requests
                    .register(key, questions.owner, &method, questions.jobs.clone())
            });
            if !registered {
                observe_aside(&d.books, Aside::QuestionUnregistered);
            }
        }
        if failed {
            skipped += 1;
            continue;
        }
        if crate::protocol::has_lone_surrogate(n.resp_json.get().as_bytes()) {
            // The control plane refuses it (400 invalid_json_payload, final): never
            // posted; the notifications after it and the answer still go.
            observe_aside(&d.books, Aside::UnpairedNotification);
            continue;
        }
        let method = message_method(&n.resp_json).map(|m| crate::telemetry::safe_method(&m));
        let note = Reply {
            resp_json: Some(n.resp_json),
            resp_headers: n.resp_headers,
            resp_code: 200,
            resp_type: RespType::JsonrpcNotify,
        };
        let body = body(&ids.request_id, &ids.channel, &note);
        let report = d
            .responder
            .post(PostKind::Notify, body, &ids.shard_token, deadline)
            .await;
        failed = report.delivery != Delivery::Acked;
        observe_aside(
            &d.books,
            Aside::NotificationPosted {
                method,
                report: &report,
            },
        );
    }
    if skipped > 0 {
        observe_aside(&d.books, Aside::NotificationsSkipped(skipped));
    }
    TaskEnd::Finished
}

/// The leg's result when the stop cut it short: nothing of the request left (safe to
/// retry), or it may have (effect unknown). Decided by the admission, which knows.
fn cut_leg(cmd: &Command, admission: &Admission) -> LegResult {
    let failure = if admission.is_sent() {
        LegFailure::CancelledAfterWrite
    } else {
        LegFailure::NotAdmitted
    };
    failed_leg(cmd, failure)
}

/// `cmd`'s leg ended by `failure` without the MCP server's answer.
pub(super) fn failed_leg(cmd: &Command, failure: LegFailure) -> LegResult {
    let (rpc_id, resp_type) = match &cmd.kind {
        CommandKind::JsonRpc(p) if p.expects_response() => (p.id(), RespType::JsonrpcResponse),
        CommandKind::JsonRpc(_) => (None, RespType::NotifyAck),
        CommandKind::SessionTermination => (None, RespType::SessionTerminationResponse),
        CommandKind::OAuthDiscovery => (None, RespType::OauthDiscoveryResponse),
        CommandKind::Unknown(u) => match u.request() {
            Some(p) => (p.id(), RespType::JsonrpcResponse),
            None => (None, RespType::SessionTerminationResponse),
        },
    };
    LegResult::failed(failure, rpc_id, resp_type)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_end_of_a_leg_is_logged_under_this_modules_own_target() {
        assert_eq!(
            Some(super::super::observe::LOG_LEG),
            module_path!().strip_suffix("::tests")
        );
    }
}
