//! What a send error of the gateway's one client says, for the downstream and doctor
//! classifications: its stable kind (`egress::error::SendErrorKind`, read from the cause
//! chain once) and whether the gateway's own descriptors or socket memory ran out
//! (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`: see `crate::descriptors`) while it resolved
//! or connected.
//!
//! Must not decide outcomes: callers map [`SendFacts`] to their own failure kinds.

use crate::egress::client::{SendError, SendErrorKind};

/// What a send error says, read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendFacts {
    pub(crate) kind: SendErrorKind,
    /// The gateway ran out of descriptors or socket memory while resolving or connecting:
    /// a local failure, never the peer's (a resolver out of descriptors reports a DNS
    /// error). Never set for a failure after the connection was up.
    pub(crate) exhausted: bool,
}

impl SendFacts {
    pub(crate) fn of(error: &SendError) -> Self {
        let kind = error.kind();
        let connecting = error.is_connect() || kind == SendErrorKind::Dns;
        Self {
            kind,
            exhausted: connecting && crate::descriptors::any_is_exhaustion(error.io_errors()),
        }
    }

    /// The facts of `kind` without exhaustion: for classification table tests.
    #[cfg(test)]
    pub(crate) fn given(kind: SendErrorKind) -> Self {
        Self { kind, exhausted: false }
    }

    /// The same facts, with the gateway's own resources exhausted: for table tests.
    #[cfg(test)]
    pub(crate) fn exhausted(self) -> Self {
        Self {
            exhausted: true,
            ..self
        }
    }
}
