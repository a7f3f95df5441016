//! Fault scripts: which response POSTs and polls misbehave, and how; commands fed in.
//!
//! Pure: parsing (TOML, see the crate header, `lib.rs`, for the format) and matching.
//! Applying an action (holding a connection, closing it) is the server's job.

use std::path::Path;
use std::time::Duration;

use super::command::NewCommand;
use crate::protocol::RespType;

mod parse;

/// Everything a simulator run does differently from a healthy control plane.
#[derive(Clone, Debug, Default)]
pub struct FaultScript {
    /// Response-POST faults; the first matching rule applies.
    pub(crate) rules: Vec<FaultRule>,
    /// Poll faults; the first matching rule with an action applies.
    pub(crate) polls: Vec<PollFault>,
    /// Commands queued at start (or after a given command's first response POST).
    pub(crate) feed: Vec<FeedEntry>,
}

/// One response-POST fault.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FaultRule {
    pub(crate) select: Selector,
    pub(crate) attempts: Attempts,
    pub(crate) action: FaultAction,
}

/// Which commands a rule applies to; every field that is set must match.
/// A selector with no command field (`order`, `method`, `tool`) also matches POSTs
/// for unknown request ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Selector {
    /// 1-based order in which commands were queued (raw ones included).
    pub(crate) order: Option<u64>,
    pub(crate) method: Option<String>,
    /// `params.name` of a `tools/call`.
    pub(crate) tool: Option<String>,
    pub(crate) resp_type: Option<RespTypeSelector>,
}

/// The `resp_type` of the POST a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RespTypeSelector {
    Exactly(RespType),
    /// Any final type (everything but `jsonrpc_notify`).
    Terminal,
}

/// Which POST attempts a rule applies to. Attempt `n` is the `n`-th POST received for the
/// same request id with the same `resp_type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Attempts {
    All,
    Only(Vec<u32>),
}

/// What the simulator does instead of (or before) normal handling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Read the whole request, then never answer (until the client gives up).
    Hold,
    /// Read the whole request, then drop the connection without a response.
    Close,
    /// Answer with this status (and an `APIErrorResponse` body); the request stays pending.
    Status { status: u16, retry_after: Option<String> },
    /// Wait, then handle normally.
    Delay(Duration),
    /// A poll only: `409 wrong_cluster` with this placement token and policy revision
    /// (wire 2026-08-25's routing correction).
    WrongCluster { token: String, revision: u64 },
}

/// One poll fault. `nth` counts every poll request received, 1-based; absent: every poll.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PollFault {
    pub(crate) nth: Option<u64>,
    pub(crate) action: Option<FaultAction>,
    /// Hand out up to `limit + extra_commands` commands (the limit is only a hint).
    pub(crate) extra_commands: usize,
}

/// A command fed into the queue by the script.
#[derive(Clone, Debug)]
pub(crate) struct FeedEntry {
    pub(crate) command: FeedCommand,
    /// Queue it when the first response POST for the command of this order arrives;
    /// absent: queue at start.
    pub(crate) after_order: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) enum FeedCommand {
    /// Verbatim JSON, one element of `commands` (malformed envelopes, unknown types).
    Raw(serde_json::Value),
    /// A well-formed command with fresh ids.
    Built(NewCommand),
}

/// A fault script that could not be loaded; the message names the entry and the problem.
#[derive(Debug, thiserror::Error)]
pub enum FaultScriptError {
    #[error("cannot read fault script {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("fault script is not valid TOML: {0}")]
    Syntax(#[from] toml::de::Error),
    #[error("fault script {entry}: {problem}")]
    Invalid { entry: String, problem: String },
}

/// What a matched poll fault asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PollPlan {
    pub(crate) action: Option<FaultAction>,
    pub(crate) extra_commands: usize,
}

/// What is known about the command a response POST refers to.
#[derive(Clone, Debug, Default)]
pub(crate) struct PostView<'a> {
    pub(crate) order: Option<u64>,
    pub(crate) method: Option<&'a str>,
    pub(crate) tool: Option<&'a str>,
    pub(crate) resp_type: Option<RespType>,
    pub(crate) attempt: u32,
}

impl FaultScript {
    /// Parses the TOML format documented in the crate header (`lib.rs`).
    pub fn from_toml_str(text: &str) -> Result<Self, FaultScriptError> {
        parse::script(text)
    }

    /// Reads and parses a fault script file.
    pub(crate) fn from_file(path: &Path) -> Result<Self, FaultScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| FaultScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// The fault for a response POST, if a rule matches.
    pub(crate) fn response_fault(&self, post: &PostView<'_>) -> Option<&FaultAction> {
        self.rules.iter().find(|r| r.matches(post)).map(|r| &r.action)
    }

    /// The plan for the `nth` poll (1-based).
    pub(crate) fn poll_plan(&self, nth: u64) -> PollPlan {
        let applies = |p: &&PollFault| p.nth.is_none_or(|n| n == nth);
        PollPlan {
            action: self.polls.iter().filter(applies).find_map(|p| p.action.clone()),
            extra_commands: self
                .polls
                .iter()
                .filter(applies)
                .map(|p| p.extra_commands)
                .max()
                .unwrap_or(0),
        }
    }
}

impl FaultRule {
    fn matches(&self, post: &PostView<'_>) -> bool {
        let s = &self.select;
        let field = |want: &Option<String>, have: Option<&str>| want.as_deref().is_none_or(|w| have == Some(w));
        let resp_type = match (s.resp_type, post.resp_type) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(RespTypeSelector::Exactly(want)), Some(have)) => want == have,
            (Some(RespTypeSelector::Terminal), Some(have)) => have.is_terminal(),
        };
        let attempt = match &self.attempts {
            Attempts::All => true,
            Attempts::Only(list) => list.contains(&post.attempt),
        };
        s.order.is_none_or(|o| post.order == Some(o))
            && field(&s.method, post.method)
            && field(&s.tool, post.tool)
            && resp_type
            && attempt
    }
}

/// Parses a `resp_type` string as the wire spells it.
pub(crate) fn parse_resp_type(s: &str) -> Option<RespType> {
    match s {
        "jsonrpc_response" => Some(RespType::JsonrpcResponse),
        "jsonrpc_notify" => Some(RespType::JsonrpcNotify),
        "notify_ack" => Some(RespType::NotifyAck),
        "session_termination_response" => Some(RespType::SessionTerminationResponse),
        "oauth_discovery_response" => Some(RespType::OauthDiscoveryResponse),
        _ => None,
    }
}
