//! Per-request logging of the era bridge: the level a 2026-07-28 request asked for,
//! which of the server's notifications reach that request (pure), and the relay that
//! applies it between a forwarded request's leg and the caller ([`relay`]).

use std::future::Future;
use std::pin::{pin, Pin};

use tokio::sync::mpsc;

use super::park::Ask;
use super::Notification;
use crate::downstream::{LegResult, NotifySink};

/// Notifications of one bridged request waiting to be filtered (the sink after it is
/// bounded too: backpressure reaches the server's stream either way).
pub(crate) const RELAY_BOUND: usize = 64;

/// The gateway's answer to a server's request that reached a relayed request's stream
/// (no caller of that request can be asked): it answers the server and returns.
pub(crate) type AnswerAsk<'a> = &'a (dyn Fn(Ask) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> + Sync);

/// Drives `call` (a leg whose notifications go to the sender of `relayed`) and hands
/// each notification to `notes` if `filter` admits it, in order, all before the leg's
/// end is returned. A caller that is gone drops them, as on the unbridged path. With
/// `answer`, a server's request among them is answered by it and never relayed.
pub(crate) async fn relay(
    call: impl Future<Output = LegResult>,
    mut relayed: mpsc::Receiver<Notification>,
    notes: &NotifySink,
    filter: LogFilter,
    answer: Option<AnswerAsk<'_>>,
) -> LegResult {
    let mut call = pin!(call);
    let leg = loop {
        tokio::select! {
            biased;
            // cancel-safe: the call is polled by reference and never dropped here.
            leg = &mut call => break leg,
            // cancel-safe: a message taken from the channel is handed on in the arm.
            Some(note) = relayed.recv() => match (answer, Ask::of(&note)) {
                (Some(answer), Some(ask)) => answer(ask).await,
                _ => pass(filter, note, notes).await,
            },
        }
    };
    relayed.close();
    while let Ok(note) = relayed.try_recv() {
        pass(filter, note, notes).await;
    }
    leg
}

async fn pass(filter: LogFilter, note: Notification, notes: &NotifySink) {
    if filter.admits(&note) {
        let _ = notes.send(note).await;
    }
}

/// A log level of `notifications/message` (RFC 5424 severities, lowest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const ALL: [Self; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == text)
    }
}

/// Which notifications a forwarded modern request receives: `notifications/message` only
/// at or above the level it asked for (none when it asked for none); list and resource
/// changes never (they belong to listen streams); every other notification passes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogFilter(pub(crate) Option<LogLevel>);

impl LogFilter {
    pub(crate) fn admits(self, note: &Notification) -> bool {
        #[derive(serde::Deserialize)]
        struct Probe {
            method: Option<String>,
            params: Option<LevelProbe>,
        }
        #[derive(serde::Deserialize)]
        struct LevelProbe {
            level: Option<String>,
        }
        let Ok(probe) = serde_json::from_str::<Probe>(note.resp_json.get()) else {
            return true;
        };
        match probe.method.as_deref() {
            Some("notifications/message") => {}
            // A 2026-07-28 caller gets list and resource changes on a listen stream only.
            Some(m) if m.ends_with("/list_changed") || m == "notifications/resources/updated" => return false,
            _ => return true,
        }
        let level = probe.params.and_then(|p| p.level).and_then(|l| LogLevel::parse(&l));
        match (self.0, level) {
            (None, _) => false,
            (Some(min), Some(level)) => level >= min,
            // A level the server made up: shown only to a caller that asked for everything.
            (Some(min), None) => min == LogLevel::Debug,
        }
    }
}
