//! The TOML form of fault scripts (format in the crate header, `lib.rs`): raw serde
//! shapes, then validation that names the entry (`rule 2`, `poll 1`, `feed 3`) and the
//! problem.

use serde::Deserialize;

use super::{
    parse_resp_type, Attempts, FaultAction, FaultRule, FaultScript, FaultScriptError, FeedCommand, FeedEntry,
    PollFault, RespTypeSelector, Selector,
};
use crate::command::NewCommand;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    #[serde(default)]
    rule: Vec<RawRule>,
    #[serde(default)]
    poll: Vec<RawPoll>,
    #[serde(default)]
    feed: Vec<RawFeed>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "match", default)]
    select: RawSelect,
    attempts: Option<RawAttempts>,
    action: Option<String>,
    status: Option<u16>,
    retry_after: Option<String>,
    delay: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSelect {
    order: Option<u64>,
    method: Option<String>,
    tool: Option<String>,
    resp_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawAttempts {
    Word(String),
    List(Vec<u32>),
}

struct RawAction {
    action: Option<String>,
    status: Option<u16>,
    retry_after: Option<String>,
    delay: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoll {
    nth: Option<u64>,
    extra_commands: Option<usize>,
    action: Option<String>,
    status: Option<u16>,
    retry_after: Option<String>,
    delay: Option<String>,
    wrong_cluster: Option<RawWrongCluster>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWrongCluster {
    token: String,
    revision: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFeed {
    raw: Option<String>,
    jsonrpc: Option<String>,
    command_type: Option<String>,
    channel: Option<String>,
    response_timeout: Option<String>,
    after_order: Option<u64>,
}

/// Parses and validates a whole script.
pub(super) fn script(text: &str) -> Result<FaultScript, FaultScriptError> {
    let raw: RawScript = toml::from_str(text)?;
    Ok(FaultScript {
        rules: entries(raw.rule, "rule", RawRule::build)?,
        polls: entries(raw.poll, "poll", RawPoll::build)?,
        feed: entries(raw.feed, "feed", RawFeed::build)?,
    })
}

/// Builds every entry of one kind in order; errors name it `{kind} N`, counted from 1.
fn entries<R, T>(
    raw: Vec<R>,
    kind: &str,
    build: impl Fn(R, &str) -> Result<T, FaultScriptError>,
) -> Result<Vec<T>, FaultScriptError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, r)| build(r, &format!("{kind} {}", i + 1)))
        .collect()
}

fn invalid(entry: &str, problem: impl Into<String>) -> FaultScriptError {
    FaultScriptError::Invalid {
        entry: entry.to_owned(),
        problem: problem.into(),
    }
}

impl RawAction {
    fn build(self, entry: &str) -> Result<Option<FaultAction>, FaultScriptError> {
        let mut found = Vec::new();
        match self.action.as_deref() {
            None => {}
            Some("hold") => found.push(FaultAction::Hold),
            Some("close") => found.push(FaultAction::Close),
            Some(other) => return Err(invalid(entry, format!("action `{other}` is not `hold` or `close`"))),
        }
        if let Some(status) = self.status {
            if !(400..=599).contains(&status) {
                return Err(invalid(entry, format!("status {status} is not a 4xx or 5xx status")));
            }
            found.push(FaultAction::Status {
                status,
                retry_after: self.retry_after.clone(),
            });
        } else if self.retry_after.is_some() {
            return Err(invalid(entry, "retry_after needs a status"));
        }
        if let Some(delay) = &self.delay {
            let d = humantime::parse_duration(delay).map_err(|e| invalid(entry, format!("delay `{delay}`: {e}")))?;
            found.push(FaultAction::Delay(d));
        }
        match found.len() {
            0 | 1 => Ok(found.pop()),
            _ => Err(invalid(entry, "give exactly one of action, status, delay")),
        }
    }
}

impl RawRule {
    fn build(self, entry: &str) -> Result<FaultRule, FaultScriptError> {
        let resp_type = match self.select.resp_type.as_deref() {
            None => None,
            Some("terminal") => Some(RespTypeSelector::Terminal),
            Some(s) => Some(RespTypeSelector::Exactly(parse_resp_type(s).ok_or_else(|| {
                invalid(entry, format!("match.resp_type `{s}` is not a resp_type or `terminal`"))
            })?)),
        };
        let attempts = match self.attempts {
            None => Attempts::All,
            Some(RawAttempts::Word(w)) if w == "all" => Attempts::All,
            Some(RawAttempts::Word(w)) => {
                return Err(invalid(entry, format!("attempts `{w}` is not \"all\" or a list")))
            }
            Some(RawAttempts::List(l)) if l.contains(&0) => return Err(invalid(entry, "attempts are 1-based")),
            Some(RawAttempts::List(l)) => Attempts::Only(l),
        };
        let action = RawAction {
            action: self.action,
            status: self.status,
            retry_after: self.retry_after,
            delay: self.delay,
        }
        .build(entry)?
        .ok_or_else(|| invalid(entry, "give one of action, status, delay"))?;
        let s = self.select;
        Ok(FaultRule {
            select: Selector {
                order: s.order,
                method: s.method,
                tool: s.tool,
                resp_type,
            },
            attempts,
            action,
        })
    }
}

impl RawPoll {
    fn build(self, entry: &str) -> Result<PollFault, FaultScriptError> {
        let action = RawAction {
            action: self.action,
            status: self.status,
            retry_after: self.retry_after,
            delay: self.delay,
        }
        .build(entry)?;
        let action = match (action, self.wrong_cluster) {
            (None, Some(w)) => Some(FaultAction::WrongCluster {
                token: w.token,
                revision: w.revision,
            }),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    entry,
                    "give exactly one of action, status, delay, wrong_cluster",
                ))
            }
            (action, None) => action,
        };
        let extra_commands = self.extra_commands.unwrap_or(0);
        if action.is_none() && extra_commands == 0 {
            return Err(invalid(
                entry,
                "give an action, status, delay, wrong_cluster or extra_commands",
            ));
        }
        Ok(PollFault {
            nth: self.nth,
            action,
            extra_commands,
        })
    }
}

impl RawFeed {
    fn build(self, entry: &str) -> Result<FeedEntry, FaultScriptError> {
        let json = |field: &str, text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| invalid(entry, format!("{field} is not JSON: {e}")))
        };
        let command = match (self.raw, self.jsonrpc) {
            (Some(_), Some(_)) => return Err(invalid(entry, "give raw or jsonrpc, not both")),
            (Some(raw), None) => {
                if self.command_type.is_some() || self.channel.is_some() || self.response_timeout.is_some() {
                    return Err(invalid(entry, "raw entries are sent verbatim: no other command fields"));
                }
                FeedCommand::Raw(json("raw", &raw)?)
            }
            (None, jsonrpc) => {
                let mut cmd = match jsonrpc {
                    Some(text) => NewCommand::jsonrpc(json("jsonrpc", &text)?),
                    None if self.command_type.is_some() => NewCommand::session_termination(None),
                    None => return Err(invalid(entry, "give raw, jsonrpc or command_type")),
                };
                if let Some(t) = self.command_type {
                    cmd = cmd.command_type(t);
                }
                if let Some(c) = self.channel {
                    cmd = cmd.channel(c);
                }
                if let Some(t) = self.response_timeout {
                    cmd = cmd.response_timeout(t);
                }
                FeedCommand::Built(cmd)
            }
        };
        Ok(FeedEntry {
            command,
            after_order: self.after_order,
        })
    }
}
