//! What the era bridge records on the downstream span: the caller's era, the server's
//! and the translation step, as words; never a payload or a `requestState`.

/// A step of the era bridge, recorded on the current (downstream) span: the caller's
/// era, the server's and the step taken; never a payload or a `requestState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A 2026-07-28 caller's `server/discover` answered from the owned session.
    DiscoverAnswered,
    /// A 2026-07-28 caller's request refused or answered here (envelope, headers,
    /// revision, a removed method).
    AnsweredLocally,
    /// A 2026-07-28 caller's request forwarded to a handshake-era server.
    Forwarded,
    /// A call held across input rounds (its start).
    Held,
    /// A retry that continued a parked call.
    Continued,
    /// A handshake-era caller's `initialize` answered from a 2026-07-28 server's discovery.
    InitializeAnswered,
    /// A handshake-era caller's request stamped with the envelope for a 2026-07-28 server.
    Stamped,
}

impl Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::DiscoverAnswered => "discover_answered",
            Self::AnsweredLocally => "answered_locally",
            Self::Forwarded => "forwarded",
            Self::Held => "held",
            Self::Continued => "continued",
            Self::InitializeAnswered => "initialize_answered",
            Self::Stamped => "stamped",
        }
    }

    /// The eras of a step: (caller, server).
    fn eras(self) -> (&'static str, &'static str) {
        match self {
            Self::InitializeAnswered | Self::Stamped => ("legacy", "modern"),
            _ => ("modern", "legacy"),
        }
    }

    /// Records this step on the current span.
    pub(crate) fn trace(self) {
        let span = tracing::Span::current();
        let (caller, server) = self.eras();
        span.record(crate::telemetry::attrs::ERA_CALLER, caller);
        span.record(crate::telemetry::attrs::ERA_SERVER, server);
        span.record(crate::telemetry::attrs::ERA_STEP, self.as_str());
    }
}
