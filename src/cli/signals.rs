//! What `tunnelgate run` does on each signal: the "Signals" table of docs/operations.md, kept here as
//! one declarative table ([`TABLE`]) plus the real-time signals.
//!
//! Invariants:
//! - no catchable signal that terminates by default does so, except SIGQUIT (kept: an
//!   operator's deliberate "stop now and dump core") and the synchronous faults a process
//!   cannot survive (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS);
//! - every signal here gets a handler, none is set to SIG_IGN: a handled signal is reset to
//!   its default at `exec`, so a stdio child starts with the dispositions its own program
//!   expects. SIGPIPE is ignored by the Rust runtime before `main`, and std's `Command`
//!   (which tokio's uses) resets it to the default in the child, with an empty signal mask;
//! - one task acts on the signals, one at a time, in the order it sees them; a reload
//!   reads files off the runtime's workers, and never touches a running command.
//!
//! `main` blocks the signals of the table first thing in `run` ([`defer`]), so one that
//! arrives while the configuration loads and the runtime is built waits, pending; the
//! handlers are installed when `run`'s future starts, which unblocks them on that thread
//! (the runtime's threads keep them blocked, so each is delivered there).

use std::borrow::Cow;

use futures_util::stream::{self, BoxStream, StreamExt};
use nix::sys::signal::SigSet;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::field::{display, DisplayValue};

use super::ConfigSource;
use crate::app::{StatusHandle, StopHandle};
use crate::config::Config;
use crate::ops::GatewayState;
use crate::supervisor::Supervisor;
use crate::telemetry::logging::LogFilter;

/// What the gateway does on a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Meaning {
    /// A stop request: the first graceful, a second one "now" (SIGTERM, SIGINT).
    Stop,
    /// Reload what can be reloaded safely (SIGHUP).
    Reload,
    /// A one-shot status dump to the log (SIGUSR1).
    StatusDump,
    /// Reserved for a later use: logged at debug, nothing else (SIGUSR2).
    Reserved,
    /// No meaning: logged as a warning with the note, nothing else.
    Ignored(&'static str),
}

/// The signals given a meaning, by number. A declarative table (exempt from the function
/// size target); the "Signals" section of docs/operations.md says the same, row for row.
const TABLE: [(i32, &str, Meaning); 13] = [
    (libc::SIGTERM, "SIGTERM", Meaning::Stop),
    (libc::SIGINT, "SIGINT", Meaning::Stop),
    (libc::SIGHUP, "SIGHUP", Meaning::Reload),
    (libc::SIGUSR1, "SIGUSR1", Meaning::StatusDump),
    (libc::SIGUSR2, "SIGUSR2", Meaning::Reserved),
    (libc::SIGALRM, "SIGALRM", Meaning::Ignored(NO_TIMERS)),
    (libc::SIGVTALRM, "SIGVTALRM", Meaning::Ignored(NO_TIMERS)),
    (libc::SIGPROF, "SIGPROF", Meaning::Ignored(NO_TIMERS)),
    (
        libc::SIGIO,
        "SIGIO",
        Meaning::Ignored("the gateway asks for no signal-driven I/O"),
    ),
    (
        libc::SIGPWR,
        "SIGPWR",
        Meaning::Ignored("a power notice; a supervisor stops the gateway with SIGTERM"),
    ),
    (
        libc::SIGSTKFLT,
        "SIGSTKFLT",
        Meaning::Ignored("a coprocessor stack fault, never raised on this platform"),
    ),
    (
        libc::SIGXCPU,
        "SIGXCPU",
        Meaning::Ignored(
            "the soft CPU-time limit (RLIMIT_CPU) was passed; the hard limit ends the process with SIGKILL",
        ),
    ),
    (
        libc::SIGXFSZ,
        "SIGXFSZ",
        Meaning::Ignored("a write passed the file-size limit (RLIMIT_FSIZE); it fails with EFBIG instead"),
    ),
];

const NO_TIMERS: &str = "the gateway sets no signalling timers";

/// The real-time signals (SIGRTMIN..=SIGRTMAX): none is used by the gateway.
const REAL_TIME: &str = "the gateway uses no real-time signals";

/// The handlers of one run, installed; [`Signals::watch`] acts on them.
pub(crate) struct Signals {
    streams: Vec<BoxStream<'static, (Cow<'static, str>, Meaning)>>,
    /// Signals whose handler could not be installed, reported once the log is up.
    failed: Vec<(Cow<'static, str>, std::io::Error)>,
}

/// What acting on a signal needs.
pub(crate) struct Watch {
    pub(crate) stop: StopHandle,
    pub(crate) status: StatusHandle,
    pub(crate) reload: Reload,
}

/// SIGHUP's state: how the running configuration was loaded, what of it is in force, and
/// the handle that swaps the log filter.
pub(crate) struct Reload {
    pub(crate) source: ConfigSource,
    pub(crate) running: Config,
    pub(crate) log_filter: LogFilter,
    /// Runs the file reads off the runtime's workers.
    pub(crate) supervisor: Supervisor,
}

/// Blocks the signals of [`TABLE`] on the calling thread, and so on every thread it starts
/// from now on: one that arrives before [`Signals::install`] waits, pending, instead of
/// taking its default action. The real-time signals are not deferred.
pub(crate) fn defer() {
    // Without it the window stays as it was; nothing else depends on it.
    let _ = table_set().thread_block();
}

fn table_set() -> SigSet {
    let mut set = SigSet::empty();
    for (number, _, _) in TABLE {
        if let Ok(signal) = nix::sys::signal::Signal::try_from(number) {
            set.add(signal);
        }
    }
    set
}

impl Signals {
    /// Installs a handler for every signal of [`TABLE`] and every real-time signal, then
    /// unblocks on this thread what [`defer`] blocked (a pending one is delivered now).
    /// Called on the thread that called [`defer`].
    pub(crate) fn install() -> Signals {
        let mut all: Vec<(i32, Cow<'static, str>, Meaning)> = TABLE
            .iter()
            .map(|&(number, name, meaning)| (number, Cow::Borrowed(name), meaning))
            .collect();
        let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        all.extend((min..=max).map(|n| {
            (
                n,
                Cow::Owned(format!("SIGRTMIN+{}", n - min)),
                Meaning::Ignored(REAL_TIME),
            )
        }));
        let mut signals = Signals {
            streams: Vec::with_capacity(all.len()),
            failed: Vec::new(),
        };
        for (number, name, meaning) in all {
            match signal(SignalKind::from_raw(number)) {
                Ok(stream) => signals.streams.push(received(stream, name, meaning)),
                Err(e) => signals.failed.push((name, e)),
            }
        }
        let _ = table_set().thread_unblock();
        signals
    }

    /// Acts on each signal, in order, until `done`.
    pub(crate) async fn watch(self, mut watch: Watch, done: CancellationToken) {
        for (name, e) in &self.failed {
            tracing::error!(signal = %name, error = %e, "cannot handle this signal: it keeps its default action");
        }
        let mut received = stream::select_all(self.streams);
        loop {
            let (name, meaning) = tokio::select! {
                biased;
                // cancel-safe: waiting on a token.
                () = done.cancelled() => return,
                // cancel-safe: signal streams keep what they received until polled again.
                next = received.next() => match next {
                    Some(signal) => signal,
                    None => return,
                },
            };
            watch.act(&name, meaning).await;
        }
    }
}

/// Each delivery of `stream`, named.
fn received(
    stream: Signal,
    name: Cow<'static, str>,
    meaning: Meaning,
) -> BoxStream<'static, (Cow<'static, str>, Meaning)> {
    stream::unfold(stream, |mut s| async move { s.recv().await.map(|()| ((), s)) })
        .map(move |()| (name.clone(), meaning))
        .boxed()
}

impl Watch {
    async fn act(&mut self, name: &str, meaning: Meaning) {
        match meaning {
            Meaning::Stop => {
                tracing::info!(signal = name, "stop signal received (a second one stops now)");
                self.stop.stop();
            }
            Meaning::Reload => self.reload.run().await,
            Meaning::StatusDump => dump(&self.status),
            Meaning::Reserved => tracing::debug!(signal = name, "reserved signal received; it has no use yet"),
            Meaning::Ignored(note) => {
                tracing::warn!(
                    signal = name,
                    note,
                    "signal received and ignored: the gateway gives it no meaning"
                );
            }
        }
    }
}

/// A key a reload applies to a running gateway; every other changed key needs a restart.
/// TLS certificate and key files join this set once they exist: re-read, parsed and
/// swapped into the clients' configuration in [`Reload::apply`], a file that does not
/// parse keeping the one in force, as an invalid configuration keeps the running one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reloadable {
    /// `telemetry.log_level`: the log filter in force is replaced.
    LogLevel,
}

impl Reloadable {
    const ALL: [Self; 1] = [Self::LogLevel];

    /// The configuration key, as [`Config::changed_keys`] names it.
    fn key(self) -> &'static str {
        match self {
            Self::LogLevel => "telemetry.log_level",
        }
    }

    /// The reloadable key `key` names; `None` for a key that needs a restart.
    fn of(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.key() == key)
    }
}

impl Reload {
    /// SIGHUP: loads the configuration again the way `run` did (the file, the environment,
    /// the flags), applies what [`Reloadable`] allows and logs what it did and did not do.
    /// An invalid configuration changes nothing and is logged naming its key.
    pub(crate) async fn run(&mut self) {
        let source = self.source.clone();
        let loaded = match self.supervisor.spawn_blocking(move || source.load()).await {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: the configuration could not be read; the running one is kept");
                return;
            }
        };
        let new = match loaded {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(
                    key = e.key(),
                    kind = e.kind(),
                    error = %e,
                    "SIGHUP: the new configuration is invalid; the running one is kept"
                );
                return;
            }
        };
        let (mut reloadable, mut restart) = (Vec::new(), Vec::new());
        for key in self.running.changed_keys(&new) {
            match Reloadable::of(&key) {
                Some(r) => reloadable.push(r),
                None => restart.push(key),
            }
        }
        if !restart.is_empty() {
            tracing::warn!(
                keys = %restart.join(", "),
                "SIGHUP: these changed keys take effect only after a restart; not applied"
            );
        }
        let applied = self.apply(&new, &reloadable);
        tracing::info!(
            applied = %applied.join(", "),
            restart_needed = %restart.join(", "),
            "SIGHUP: configuration reloaded"
        );
    }

    /// Applies each changed reloadable key of `new`; returns those applied.
    fn apply(&mut self, new: &Config, changed: &[Reloadable]) -> Vec<&'static str> {
        let mut applied = Vec::new();
        for &reload in changed {
            match reload {
                Reloadable::LogLevel => {
                    let (from, to) = (&self.running.telemetry.log_level, &new.telemetry.log_level);
                    // Logged under the filter in force, so that it shows whatever the new one hides.
                    tracing::info!(from = %from, to = %to, "SIGHUP: applying telemetry.log_level");
                    match self.log_filter.set(to) {
                        Ok(()) => {
                            self.running.telemetry.log_level.clone_from(to);
                            applied.push(reload.key());
                        }
                        Err(e) => tracing::error!(
                            key = reload.key(),
                            kind = e.kind(),
                            error = %e,
                            "SIGHUP: the log filter was not changed"
                        ),
                    }
                }
            }
        }
        applied
    }
}

/// SIGUSR1: one log line with what `/status` shows and the command counts so far, each
/// value plain (`state=ready`) or a nested field of its own (`fence.held=true`,
/// `fatal.category=...`; absent when the `/status` value is `null`). Nothing in it is a
/// payload or a secret: the `/status` document carries neither.
fn dump(status: &StatusHandle) {
    let (Some(doc), Some(tally)) = (status.status(), status.accounting()) else {
        tracing::info!("status dump (SIGUSR1): the gateway is not serving yet");
        return;
    };
    let (fence, fatal, polls) = (&doc.fence, doc.fatal.as_ref(), &doc.control_plane);
    tracing::info!(
        mode = %doc.mode.as_str(),
        state = %state_word(doc.state),
        ready = doc.ready,
        fence.held = fence.held,
        fence.leg = fence.leg.map(|l| display(l.as_str())),
        fence.request_id = text(&fence.request_id),
        fence.channel = text(&fence.channel),
        fence.held_seconds = fence.held_seconds,
        fatal.category = fatal.map(|f| display(f.category.as_str())),
        fatal.exit_code = fatal.map(|f| f.exit_code),
        fatal.request_id = fatal.and_then(|f| f.request_id.as_deref()).map(display),
        fatal.channel = fatal.and_then(|f| f.channel.as_deref()).map(display),
        fatal.method = fatal.and_then(|f| f.method.as_deref()).map(display),
        fatal.latched_at = fatal.map(|f| display(f.latched_at.as_str())),
        fatal.persisted = fatal.map(|f| f.persisted),
        in_flight = doc.commands.in_flight,
        queued = doc.commands.queued,
        received = tally.received,
        legs = tally.legs,
        dropped = %crate::telemetry::Accounting::pairs(&tally.dropped),
        terminal_deliveries = %crate::telemetry::Accounting::pairs(&tally.terminal),
        balanced = tally.balances(),
        control_plane.last_successful_poll_age_seconds = polls.last_successful_poll_age_seconds,
        control_plane.consecutive_poll_errors = polls.consecutive_poll_errors,
        control_plane.last_poll_error_kind = polls.last_poll_error_kind.map(display),
        control_plane.last_successful_poll_at = text(&polls.last_successful_poll_at),
        control_plane.last_acked_at = text(&polls.last_acked_at),
        downstream = %json(&doc.downstream),
        "status dump (SIGUSR1)"
    );
}

/// An optional text of the document as a plain field value (absent when `null`).
fn text(value: &Option<String>) -> Option<DisplayValue<&str>> {
    value.as_deref().map(display)
}

/// `/status` `state` as its document spells it (`ready`, `fatal`, ...).
fn state_word(state: GatewayState) -> &'static str {
    match state {
        GatewayState::Starting => "starting",
        GatewayState::Ready => "ready",
        GatewayState::Degraded => "degraded",
        GatewayState::Draining => "draining",
        GatewayState::Fatal => "fatal",
        GatewayState::Standby => "standby",
    }
}

/// Compact JSON of the channels' list (one entry per channel: no fixed field names).
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dump_spells_each_state_as_the_status_document_does() {
        for state in [
            GatewayState::Starting,
            GatewayState::Ready,
            GatewayState::Degraded,
            GatewayState::Draining,
            GatewayState::Fatal,
            GatewayState::Standby,
        ] {
            let document = serde_json::to_value(state).unwrap();
            assert_eq!(document.as_str(), Some(state_word(state)), "{state:?}");
        }
    }

    #[test]
    fn each_reloadable_key_is_named_as_the_configuration_names_a_changed_key() {
        let config = |level: &str| {
            Config::from_toml_str(&format!(
                "[control_plane]\nbase_url = \"http://127.0.0.1:1\"\ntunnel_id = \"tunnel_t\"\napi_key = \"k\"\n\
                 [mcp.channels.main]\nurl = \"http://127.0.0.1:2/mcp\"\n[telemetry]\nlog_level = \"{level}\"\n"
            ))
            .unwrap()
        };
        let changed = config("info").changed_keys(&config("debug"));
        assert_eq!(changed, [Reloadable::LogLevel.key()]);
        for reload in Reloadable::ALL {
            assert_eq!(Reloadable::of(reload.key()), Some(reload));
        }
        assert_eq!(Reloadable::of("control_plane.api_key"), None);
    }

    #[test]
    fn every_signal_of_the_table_is_named_once_and_none_is_a_fault_or_sigquit() {
        let numbers: std::collections::BTreeSet<i32> = TABLE.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(numbers.len(), TABLE.len(), "no signal twice");
        for kept in [
            libc::SIGQUIT,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGABRT,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGPIPE,
        ] {
            assert!(!numbers.contains(&kept), "signal {kept} keeps its disposition");
        }
        assert!(libc::SIGRTMIN() <= libc::SIGRTMAX());
    }
}
