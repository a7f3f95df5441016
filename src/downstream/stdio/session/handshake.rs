//! The session on the pipes: the gateway's handshake with each new child, a caller's
//! `initialize` answered from the session it opened, and a server request that no
//! caller in flight declared the capability for, refused. What to send and what an
//! answer means is decided by the pure [`super`]; this room does the writes and waits.
//!
//! Invariants:
//! - one call runs a child's handshake (`initialize`, its answer kept as the session,
//!   then `notifications/initialized`), bounded by the session's own timeout, not by
//!   the call that runs it; the others wait for it within their own limit;
//! - each write is under the admission of the call that runs it, right after
//!   `Admission::begin_send()`, as a command's own;
//! - a handshake dropped or failed half way ends the child ([`OpeningRun`]): a session in
//!   an unknown state is never used; every call it held up ends `not_sent` (nothing of
//!   its own was written), and the one that ran it says `initialize_abandoned` when the
//!   gateway's `initialize` was written and got no answer (a step of unknown effect);
//! - a child that refuses `initialize` as a 2026-07-28 server does is discovered, not
//!   initialized, and so is every later child of the channel;
//! - nothing a caller sent reaches the child's handshake; a refusal of a server request
//!   carries nothing of any caller.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::time::{sleep_until, Instant};

use super::{
    answer_caller, initialize_line, no_caller_line, read_init_answer, InitAnswer, Need, Session, INITIALIZED_LINE,
};
use crate::downstream::era::EraSetting;
use crate::downstream::identity;
use crate::downstream::stdio::child::{Child, Claim, OpeningRun};
use crate::downstream::stdio::pending::Origin;
use crate::downstream::stdio::pipe::{wait_answer, Waited};
use crate::downstream::stdio::Shared;
use crate::downstream::{LegFailure, Reply};
use crate::protocol::{json_resp_headers, RespType, MCP_SESSION_ID};
use crate::strict::Admission;
use crate::supervisor::{TaskEnd, TaskKind};
use crate::telemetry::SessionResult;

impl Shared {
    /// A running child whose session is open (starting the child and opening its
    /// session if needed), and the session the gateway holds with it (`None` for a
    /// discovered child). A call that finds the handshake running waits for it within
    /// `limit`; if it fails, the call ends `not_sent`: nothing of its own was written.
    pub(in crate::downstream::stdio) async fn ensure_open(
        self: &Arc<Self>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<(Arc<Child>, Option<Arc<Session>>), LegFailure> {
        let child = self.ensure_child(admission, limit).await?;
        match child.claim_opening() {
            Claim::Open(session) => Ok((child, session)),
            Claim::Failed => Err(LegFailure::SessionNotOpen),
            Claim::Mine => {
                let session = self.open_session(&child, admission).await?;
                Ok((child, session))
            }
            Claim::Wait => {
                tokio::select! {
                    biased;
                    // cancel-safe: waiting on a token and a timer.
                    () = child.opened.cancelled() => {}
                    () = sleep_until(limit) => return Err(LegFailure::DeadlineBeforeSend),
                }
                // The handshake it waited for ended: open, or failed (never due again).
                match child.claim_opening() {
                    Claim::Open(session) => Ok((child, session)),
                    Claim::Mine | Claim::Wait | Claim::Failed => Err(LegFailure::SessionNotOpen),
                }
            }
        }
    }

    /// The gateway's handshake with a new child: `initialize` (bounded by the session's
    /// own timeout, not by the call that runs it), its answer kept as the session, then
    /// `notifications/initialized`. Each write under `admission`, as a command's own.
    /// Dropped or failed half way, the child is ended ([`OpeningRun`]).
    async fn open_session(
        self: &Arc<Self>,
        child: &Arc<Child>,
        admission: &Admission,
    ) -> Result<Option<Arc<Session>>, LegFailure> {
        let run = child.opening_run();
        let limit = Instant::now() + self.settings.session.timeout;
        let ticket = child.mint();
        let pipe = ticket.id();
        let line = initialize_line(&self.settings.session, pipe);
        // What the child prints during the handshake belongs to no caller.
        let (nobody, _) = tokio::sync::mpsc::channel(1);
        let origin = Origin {
            id: pipe.to_string().into(),
            token: None,
            caller: None,
        };
        let mut writer = self
            .writer_for(child, limit)
            .await
            .map_err(|_| LegFailure::SessionNotOpen)?;
        let mut registration = child
            .enter(ticket, origin, nobody)
            .map_err(|_| LegFailure::SessionNotOpen)?;
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(child, line).ok_or(LegFailure::SessionNotOpen)?;
        registration.mark_written();
        let written = self.finish_write(child, &mut writer, limit, true).await;
        drop(writer);
        let cut = |why: &'static str| {
            self.metrics.stdio_session(&self.channel, SessionResult::Abandoned);
            tracing::warn!(channel = %self.channel, generation = child.generation, reason = why, "the gateway's initialize to the stdio child got no answer: ending the child");
            LegFailure::InitializeAbandoned
        };
        match written {
            Ok(()) => {}
            Err(LegFailure::ChildNotRunning) => return Err(LegFailure::SessionNotOpen),
            Err(_) => return Err(cut("the write failed or did not finish in time")),
        }
        let answer = match wait_answer(child, &mut registration, limit).await {
            Waited::Response((raw, _, _)) => raw,
            Waited::Gone => return Err(cut("the child ended")),
            Waited::TimedOut => return Err(cut("initialize timed out")),
        };
        drop(registration);
        self.settle_handshake(child, run, admission, &answer, limit).await
    }

    /// What the child's answer to the gateway's `initialize` makes of the channel: an
    /// open session (once `initialized` is written), a discovered child, or a failed
    /// handshake (`run` dropped: the child is ended).
    async fn settle_handshake(
        &self,
        child: &Arc<Child>,
        run: OpeningRun<'_>,
        admission: &Admission,
        answer: &RawValue,
        limit: Instant,
    ) -> Result<Option<Arc<Session>>, LegFailure> {
        match read_init_answer(answer.get()) {
            InitAnswer::Opened(opened) => {
                self.write_initialized(child, admission, limit).await?;
                // The server's own words, bounded and redacted as on `/status`.
                let server = opened.server_name().and_then(identity::bounded);
                let version = identity::bounded(&opened.protocol_version);
                tracing::info!(channel = %self.channel, generation = child.generation, protocol_version = version.as_deref().unwrap_or("(unreadable)"), server = server.as_deref().unwrap_or("(unnamed)"), "stdio session opened: the gateway initialized the child");
                let version = serde_json::Value::String(opened.protocol_version.clone());
                self.observed
                    .record(identity::initialized(opened.server_info(), Some(&version)));
                let opened = Arc::new(opened);
                run.open(Some(opened.clone()));
                self.metrics.stdio_session(&self.channel, SessionResult::Initialized);
                self.metrics.stdio_up(&self.channel, true);
                Ok(Some(opened))
            }
            InitAnswer::Discovered if self.settings.session.era == EraSetting::Legacy => {
                tracing::warn!(channel = %self.channel, generation = child.generation, "the stdio child refused initialize as a 2026-07-28 server does, but the channel is configured era = \"legacy\": ending it; set era = \"auto\" or \"modern\" for this server");
                self.metrics.stdio_session(&self.channel, SessionResult::Refused);
                Err(LegFailure::SessionNotOpen)
            }
            InitAnswer::Discovered => {
                self.lock().discovered = true;
                tracing::info!(channel = %self.channel, generation = child.generation, "the stdio child refused initialize as a 2026-07-28 server does: it is discovered, not initialized, and its messages pass through untouched");
                run.open(None);
                self.metrics.stdio_session(&self.channel, SessionResult::Discovered);
                self.metrics.stdio_up(&self.channel, true);
                Ok(None)
            }
            InitAnswer::Refused { code } => {
                tracing::warn!(channel = %self.channel, generation = child.generation, code, "the stdio child refused the gateway's initialize: ending it; it is restarted after the backoff");
                self.metrics.stdio_session(&self.channel, SessionResult::Refused);
                Err(LegFailure::SessionNotOpen)
            }
            InitAnswer::Invalid(why) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, problem = why, "the stdio child's answer to initialize is not an InitializeResult: ending it; it is restarted after the backoff");
                self.metrics.stdio_session(&self.channel, SessionResult::Refused);
                Err(LegFailure::SessionNotOpen)
            }
        }
    }

    /// `notifications/initialized`, which ends the handshake. A child that cannot take
    /// it is ended (by the caller's [`OpeningRun`]).
    async fn write_initialized(
        &self,
        child: &Arc<Child>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<(), LegFailure> {
        let refused = |_| {
            self.metrics.stdio_session(&self.channel, SessionResult::Refused);
            LegFailure::SessionNotOpen
        };
        let mut writer = self.writer_for(child, limit).await.map_err(refused)?;
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer
            .start(child, INITIALIZED_LINE.to_vec())
            .ok_or(LegFailure::SessionNotOpen)?;
        self.finish_write(child, &mut writer, limit, false)
            .await
            .map_err(refused)
    }

    /// A caller's `initialize`, answered from the session (opening it first if the
    /// child is down) with an `Mcp-Session-Id` of its own; nothing reaches the child.
    /// `None` when the child turned out to be discovered: the caller's `initialize` is
    /// then the server's to answer.
    pub(in crate::downstream::stdio) async fn answer_initialize(
        self: &Arc<Self>,
        admission: &Admission,
        json: &str,
        id: &str,
        limit: Instant,
    ) -> Result<Option<Reply>, LegFailure> {
        let (_, Some(session)) = self.ensure_open(admission, limit).await? else {
            return Ok(None);
        };
        let answer = answer_caller(&session, json, id, &crate::protocol::random_hex(16));
        let mut resp_headers = json_resp_headers();
        if let Some(session_id) = answer.session_id {
            resp_headers.insert(MCP_SESSION_ID.to_owned(), vec![session_id]);
        }
        Ok(Some(Reply {
            resp_json: Some(answer.json),
            resp_headers,
            resp_code: 200,
            resp_type: RespType::JsonrpcResponse,
        }))
    }

    /// Answers a server request that no caller in flight can take (it needs `need`, and
    /// none declared it), so that the child never waits on it. The answer is the
    /// gateway's own: it carries nothing of any caller and causes no effect.
    pub(in crate::downstream::stdio) fn refuse_ask(self: &Arc<Self>, child: &Arc<Child>, id: &str, need: Need) {
        tracing::info!(channel = %self.channel, generation = child.generation, capability = need.capability(), "the stdio child asked for a client capability that no caller with a request in flight declared: refused");
        self.write_unadmitted(child, no_caller_line(id, need));
    }

    /// Writes the gateway's own answer to a request the child sent (a response, never a
    /// request: it starts nothing on the child), in the background and bounded by
    /// `request_timeout`; nothing is written once the transport is stopped.
    pub(in crate::downstream::stdio) fn write_unadmitted(self: &Arc<Self>, child: &Arc<Child>, line: Vec<u8>) {
        let (shared, child) = (self.clone(), child.clone());
        self.supervisor.spawn_untracked(TaskKind::StdioReader, async move {
            let limit = Instant::now() + shared.settings.request_timeout;
            let Ok(mut writer) = shared.writer_for(&child, limit).await else {
                return TaskEnd::Finished;
            };
            if shared.lock().stopped {
                return TaskEnd::Finished;
            }
            if writer.start(&child, line).is_some() {
                let _ = shared.finish_write(&child, &mut writer, limit, false).await;
            }
            TaskEnd::Finished
        });
    }
}
