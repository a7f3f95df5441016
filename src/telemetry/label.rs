//! Metric labels as closed sets of values, typed, without telemetry importing the
//! modules that own them.
//!
//! An enum whose values are metric labels is declared with [`label_enum!`], which lists
//! its variants and their values once and implements [`LabelValue`]: in `strict`,
//! `downstream` and `control` for their outcomes, here for telemetry's own sets. Each
//! label filled from upstairs has a marker trait here ([`DeliveryLabel`], ...) that only
//! its owning enum implements, so handing a metric the wrong enum does not compile.
//! [`LabelSets`] names, once and in the wiring (`app`), which of those upstairs enums
//! fills each label, so [`Metrics::new`](super::Metrics::new) can create every alerting
//! series at zero from the enums' `ALL` lists. Label values are API: never rename one.

/// A closed set of label values, declared by the enum that owns them (with `label_enum!`,
/// which writes the list once).
pub(crate) trait LabelValue: Copy + 'static {
    /// Every value: the series created at zero at startup.
    const ALL: &'static [Self];
    /// The exported label value (API).
    fn as_label(self) -> &'static str;
}

// One marker trait per label whose values are owned upstairs: each is implemented by
// exactly the enum that owns the label, where it is declared, and the intent methods of
// [`Metrics`](super::Metrics) take it, so a value of another label set does not compile.

/// `poll_errors_total{kind}`: implemented by `control::PollErrorKind`.
pub(crate) trait PollErrorLabel: LabelValue {}
/// `downstream_requests_total{transport}`: implemented by `downstream::TransportKind`.
pub(crate) trait TransportLabel: LabelValue {}
/// `downstream_requests_total{outcome}`: implemented by `downstream::LegOutcome`.
pub(crate) trait LegOutcomeLabel: LabelValue {}
/// `deliveries_total{outcome}`: implemented by `control::Delivery`.
pub(crate) trait DeliveryLabel: LabelValue {}
/// `delivery_attempts_total{result}`: implemented by `control::AttemptResult`.
pub(crate) trait AttemptResultLabel: LabelValue {}
/// `fatal_latches_total{category}`, `fatal_info{category}`: implemented by
/// `strict::FatalCategory`.
pub(crate) trait FatalCategoryLabel: LabelValue {}

/// Which upstairs enum fills each label whose values telemetry does not own, so that
/// [`Metrics::new`](super::Metrics::new) can create their series at zero.
pub(crate) trait LabelSets {
    /// `poll_errors_total{kind}`.
    type PollErrorKind: PollErrorLabel;
    /// `downstream_requests_total{transport}`.
    type Transport: TransportLabel;
    /// `downstream_requests_total{outcome}`.
    type LegOutcome: LegOutcomeLabel;
    /// `deliveries_total{outcome}`.
    type Delivery: DeliveryLabel;
    /// `delivery_attempts_total{result}`.
    type AttemptResult: AttemptResultLabel;
    /// `fatal_latches_total{category}`, `fatal_info{category}`.
    type FatalCategory: FatalCategoryLabel;
}

/// Declares a label enum once: its variants (doc comments and attributes kept), each
/// with its label value, and from that list the enum itself (`Clone`, `Copy`, `Debug`,
/// `PartialEq`, `Eq`, plus any derives given), `as_str`, an `ALL` array in declaration
/// order, the [`LabelValue`] impl and a `Display` that writes the label.
///
/// ```text
/// label_enum! {
///     /// `polls_total{result}`.
///     pub enum PollResult {
///         Commands => "commands",
///         /// An empty poll.
///         Empty => "empty",
///     }
/// }
/// ```
macro_rules! label_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident => $label:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl $name {
            /// Every value, in declaration order.
            $vis const ALL: [Self; [$($label),+].len()] = [$(Self::$variant),+];

            /// The stable label (API: metrics, logs, spans; never rename one).
            $vis fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $label,)+
                }
            }
        }

        impl $crate::telemetry::LabelValue for $name {
            const ALL: &'static [Self] = &Self::ALL;
            fn as_label(self) -> &'static str {
                self.as_str()
            }
        }

        /// The label.
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use label_enum;

label_enum! {
    /// `polls_total{result}`.
    pub(crate) enum PollResult {
        Commands => "commands",
        Empty => "empty",
        Error => "error",
    }
}

label_enum! {
    /// `commands_received_total{command_type}`: the wire's open `command_type` folded into a
    /// closed set (a type this client does not know, and an undecodable command, are `unknown`).
    pub(crate) enum CommandType {
        JsonRpc => "jsonrpc",
        SessionTermination => "session_termination",
        OauthDiscovery => "oauth_discovery",
        Unknown => "unknown",
    }
}

label_enum! {
    /// Which response POST a delivery metric is about.
    pub(crate) enum DeliveryKind {
        Terminal => "terminal",
        Notify => "notify",
    }
}

label_enum! {
    /// Why a command never reached downstream (`commands_dropped_total{reason}`).
    pub(crate) enum DropReason {
        Expired => "expired",
        Invalid => "invalid",
        UnknownType => "unknown_type",
        Unroutable => "unroutable",
        Fatal => "fatal",
        Shutdown => "shutdown",
        /// A caller's reply that matches no server request waiting for one.
        UnmatchedReply => "unmatched_reply",
        /// A request the mode does not carry (strict mode: `subscriptions/listen`).
        Unsupported => "unsupported",
    }
}

label_enum! {
    /// `command_duration_seconds{leg}`.
    pub(crate) enum DurationLeg {
        Queue => "queue",
        FenceWait => "fence_wait",
        /// Strict mode's write-ahead intent, recorded durably before the first downstream
        /// byte: its write and flush (a file), or its transaction (etcd).
        Intent => "intent",
        Downstream => "downstream",
        Deliver => "deliver",
        Total => "total",
    }
}

label_enum! {
    /// A gateway task whose unexpected end is counted (`task_failures_total{task}`).
    pub(crate) enum TaskKind {
        Admitter => "admitter",
        Poller => "poller",
        Notifier => "notifier",
        Command => "command",
        StdioMonitor => "stdio_monitor",
        StdioReader => "stdio_reader",
        StdioStderr => "stdio_stderr",
        OpsListener => "ops_listener",
        Warmup => "warmup",
        Coordinator => "coordinator",
        /// The era bridge's tasks on an HTTP channel: a held call's exchange, its park's
        /// expiry, the owned session's standalone stream.
        EraHttp => "era_http",
    }
}

label_enum! {
    /// Where an OAuth metadata URL whose origin was not trusted was named
    /// (`oauth_untrusted_origins_total{source}`).
    pub(crate) enum OAuthOriginSource {
        /// The MCP server's `WWW-Authenticate` `resource_metadata` (an `oauth_discovery`).
        ResourceMetadata => "resource_metadata",
        /// The protected-resource metadata's first `authorization_servers` entry (channel
        /// `harpoon`'s registration from a discovery).
        AuthorizationServer => "authorization_server",
    }
}

label_enum! {
    /// How the gateway's own handshake with a stdio child ended
    /// (`stdio_sessions_total{result}`).
    pub(crate) enum SessionResult {
        /// The child answered `initialize`: callers are answered from its session.
        Initialized => "initialized",
        /// The child refused `initialize` as a 2026-07-28 server does: passed through.
        Discovered => "discovered",
        /// The child refused `initialize` otherwise, or answered with no usable result.
        Refused => "refused",
        /// `initialize` was written and got no answer (the child died or timed out).
        Abandoned => "abandoned",
    }
}

label_enum! {
    /// What the era bridge did with a 2026-07-28 caller's request on a channel whose
    /// server may be of the handshake era (`era_requests_total{handling}`).
    pub(crate) enum EraHandling {
        /// Forwarded to the legacy server with the envelope stripped, its answer shaped.
        Forwarded => "forwarded",
        /// Answered by the gateway from the owned session (`server/discover`).
        AnsweredLocally => "answered_locally",
        /// Refused by the gateway: a bad envelope, a header mismatch, an unserved
        /// revision, or a method 2026-07-28 removed.
        Refused => "refused",
        /// The server turned out to be of 2026-07-28 itself: passed through untouched.
        PassedThrough => "passed_through",
    }
}

label_enum! {
    /// Why the era bridge refused a caller's retry of a held call: nothing was sent
    /// (`era_continuations_refused_total{reason}`, and `data.reason` of the refusal).
    pub(crate) enum ContinuationRefusal {
        /// Past its expiry (parked longer than `park_timeout`, or an old token).
        Expired => "expired",
        /// Issued by another process: the gateway restarted, or another replica.
        Restarted => "restarted",
        /// Already used once (a replayed or duplicated retry).
        Consumed => "consumed",
        /// The held call ended: its server session was lost, or it finished or failed.
        Lost => "lost",
        /// Not a token of this gateway's, or altered.
        Tampered => "tampered",
        /// The token of another call (another method or other parameters).
        Mismatch => "mismatch",
    }
}

label_enum! {
    /// How a call the era bridge held across input rounds ended
    /// (`era_held_calls_total{end}`).
    pub(crate) enum EraHeldEnd {
        /// Its final answer reached a caller (the first command, or a retry).
        Answered => "answered",
        /// Parked and never continued within `park_timeout`: the server's requests were
        /// dismissed and its result reached no caller.
        Expired => "expired",
        /// It failed or was cut (the child died, its bound passed) or its park was found
        /// with the child gone: its effect is unknown.
        Lost => "lost",
    }
}

label_enum! {
    /// Why a delivery receipt was not written (`receipts_dropped_total{reason}`); the
    /// command itself is never held up or failed by it.
    pub(crate) enum ReceiptDropReason {
        /// The writer's queue was full: the journal does not keep up.
        QueueFull => "queue_full",
        /// The disk or the quota is full (`ENOSPC`, `EDQUOT`).
        DiskFull => "disk_full",
        /// The file could not be opened, rotated or written otherwise.
        WriteFailed => "write_failed",
        /// The writer has ended (the gateway is stopping).
        Stopped => "stopped",
    }
}

label_enum! {
    /// A replica's place among the replicas of a strict tunnel on etcd
    /// (`coordination_role{role}`).
    pub(crate) enum CoordinationRole {
        /// Holds the lease: polls and admits.
        Active => "active",
        /// Another replica holds the lease: never polls.
        Standby => "standby",
        /// etcd cannot be reached (or has not answered yet): neither polls nor admits.
        Unavailable => "unavailable",
        /// A cluster-wide latch is set: holds until it is cleared.
        Latched => "latched",
    }
}

label_enum! {
    /// How one lease renewal ended (`coordination_lease_renewals_total{result}`).
    pub(crate) enum RenewalResult {
        Ok => "ok",
        /// etcd did not answer, or the lease was gone.
        Failed => "failed",
    }
}

label_enum! {
    /// The write-ahead intent's two operations on etcd (`coordination_intent_ops_total{op}`).
    pub(crate) enum IntentOp {
        Record => "record",
        Settle => "settle",
    }
}

label_enum! {
    /// How an intent operation on etcd ended (`coordination_intent_ops_total{result}`).
    pub(crate) enum IntentOpResult {
        Ok => "ok",
        /// The transaction's condition failed: this replica no longer holds the lease, or a
        /// cluster-wide latch is set. Nothing was dispatched.
        Refused => "refused",
        /// etcd did not answer or refused the request.
        Failed => "failed",
    }
}

label_enum! {
    /// Where a malformed trace context was found (`trace_context_invalid_total{source}`).
    pub(crate) enum TraceContextSource {
        /// The command's connector headers.
        Header => "header",
        /// `params._meta` of the JSON-RPC message.
        Meta => "meta",
        /// The polled command's own `trace_context` (wire 2026-08-25).
        Polled => "trace_context",
    }
}

/// Every exported value of `T`, in order: the tables the label tests hold to the docs.
#[cfg(test)]
pub(crate) fn labels<T: LabelValue>() -> Vec<&'static str> {
    T::ALL.iter().map(|v| v.as_label()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_owned_label_values_are_the_documented_ones() {
        assert_eq!(labels::<PollResult>(), ["commands", "empty", "error"]);
        assert_eq!(
            labels::<CommandType>(),
            ["jsonrpc", "session_termination", "oauth_discovery", "unknown"]
        );
        assert_eq!(labels::<DeliveryKind>(), ["terminal", "notify"]);
        assert_eq!(
            labels::<DropReason>(),
            [
                "expired",
                "invalid",
                "unknown_type",
                "unroutable",
                "fatal",
                "shutdown",
                "unmatched_reply",
                "unsupported"
            ]
        );
        assert_eq!(
            labels::<DurationLeg>(),
            ["queue", "fence_wait", "intent", "downstream", "deliver", "total"]
        );
        assert_eq!(labels::<TraceContextSource>(), ["header", "meta", "trace_context"]);
        assert_eq!(
            labels::<CoordinationRole>(),
            ["active", "standby", "unavailable", "latched"]
        );
        assert_eq!(labels::<RenewalResult>(), ["ok", "failed"]);
        assert_eq!(labels::<IntentOp>(), ["record", "settle"]);
        assert_eq!(labels::<IntentOpResult>(), ["ok", "refused", "failed"]);
        assert_eq!(
            labels::<ReceiptDropReason>(),
            ["queue_full", "disk_full", "write_failed", "stopped"]
        );
        assert_eq!(
            labels::<TaskKind>(),
            [
                "admitter",
                "poller",
                "notifier",
                "command",
                "stdio_monitor",
                "stdio_reader",
                "stdio_stderr",
                "ops_listener",
                "warmup",
                "coordinator",
                "era_http"
            ]
        );
    }
}
