//! Metric labels as closed sets of values, typed, without telemetry importing the
//! modules that own them.
//!
//! An enum whose values are metric labels implements [`LabelValue`] where it is declared:
//! in `strict`, `downstream` and `control` for their outcomes, here for telemetry's own
//! sets. [`LabelSets`] names, once and in the wiring (`app`), which of those upstairs
//! enums fills each label, so [`Metrics::new`](super::Metrics::new) can create every
//! alerting series at zero from the enums' `ALL` lists. Label values are API: never
//! rename one.

/// A closed set of label values, declared by the enum that owns them.
pub trait LabelValue: Copy + 'static {
    /// Every value: the series created at zero at startup.
    const ALL: &'static [Self];
    /// The exported label value (API).
    fn as_label(self) -> &'static str;
}

/// Which upstairs enum fills each label whose values telemetry does not own. The
/// intent methods of [`Metrics`](super::Metrics) take `impl LabelValue`; in debug builds
/// each checks it was given the enum named here.
pub trait LabelSets {
    /// `poll_errors_total{kind}`.
    type PollErrorKind: LabelValue;
    /// `downstream_requests_total{transport}`.
    type Transport: LabelValue;
    /// `downstream_requests_total{outcome}`.
    type LegOutcome: LabelValue;
    /// `deliveries_total{outcome}`.
    type Delivery: LabelValue;
    /// `delivery_attempts_total{result}`.
    type AttemptResult: LabelValue;
    /// `fatal_latches_total{category}`, `fatal_info{category}`.
    type FatalCategory: LabelValue;
}

/// `polls_total{result}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollResult {
    Commands,
    Empty,
    Error,
}

/// `commands_received_total{command_type}`: the wire's open `command_type` folded into a
/// closed set (a type this client does not know, and an undecodable command, are `unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandType {
    JsonRpc,
    SessionTermination,
    Unknown,
}

/// Which response POST a delivery metric is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryKind {
    Terminal,
    Notify,
}

/// Why a command never reached downstream (`commands_dropped_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    Expired,
    Invalid,
    UnknownType,
    Unroutable,
    Fatal,
    Shutdown,
    /// A caller's reply that matches no server request waiting for one.
    UnmatchedReply,
    /// A request the mode does not carry (strict mode: `subscriptions/listen`).
    Unsupported,
}

/// `command_duration_seconds{leg}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationLeg {
    Queue,
    FenceWait,
    Downstream,
    Deliver,
    Total,
}

/// A gateway task whose unexpected end is counted (`task_failures_total{task}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Admitter,
    Poller,
    Notifier,
    Command,
    StdioMonitor,
    StdioReader,
    StdioStderr,
    OpsListener,
    Warmup,
}

/// Where a malformed trace context was found (`trace_context_invalid_total{source}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceContextSource {
    /// The command's connector headers.
    Header,
    /// `params._meta` of the JSON-RPC message.
    Meta,
}

impl PollResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Commands => "commands",
            Self::Empty => "empty",
            Self::Error => "error",
        }
    }
}

impl LabelValue for PollResult {
    const ALL: &'static [Self] = &[Self::Commands, Self::Empty, Self::Error];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl CommandType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonRpc => "jsonrpc",
            Self::SessionTermination => "session_termination",
            Self::Unknown => "unknown",
        }
    }
}

impl LabelValue for CommandType {
    const ALL: &'static [Self] = &[Self::JsonRpc, Self::SessionTermination, Self::Unknown];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl DeliveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Notify => "notify",
        }
    }
}

impl LabelValue for DeliveryKind {
    const ALL: &'static [Self] = &[Self::Terminal, Self::Notify];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Invalid => "invalid",
            Self::UnknownType => "unknown_type",
            Self::Unroutable => "unroutable",
            Self::Fatal => "fatal",
            Self::Shutdown => "shutdown",
            Self::UnmatchedReply => "unmatched_reply",
            Self::Unsupported => "unsupported",
        }
    }
}

impl LabelValue for DropReason {
    const ALL: &'static [Self] = &[
        Self::Expired,
        Self::Invalid,
        Self::UnknownType,
        Self::Unroutable,
        Self::Fatal,
        Self::Shutdown,
        Self::UnmatchedReply,
        Self::Unsupported,
    ];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl DurationLeg {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::FenceWait => "fence_wait",
            Self::Downstream => "downstream",
            Self::Deliver => "deliver",
            Self::Total => "total",
        }
    }
}

impl LabelValue for DurationLeg {
    const ALL: &'static [Self] = &[
        Self::Queue,
        Self::FenceWait,
        Self::Downstream,
        Self::Deliver,
        Self::Total,
    ];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl TaskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admitter => "admitter",
            Self::Poller => "poller",
            Self::Notifier => "notifier",
            Self::Command => "command",
            Self::StdioMonitor => "stdio_monitor",
            Self::StdioReader => "stdio_reader",
            Self::StdioStderr => "stdio_stderr",
            Self::OpsListener => "ops_listener",
            Self::Warmup => "warmup",
        }
    }
}

impl LabelValue for TaskKind {
    const ALL: &'static [Self] = &[
        Self::Admitter,
        Self::Poller,
        Self::Notifier,
        Self::Command,
        Self::StdioMonitor,
        Self::StdioReader,
        Self::StdioStderr,
        Self::OpsListener,
        Self::Warmup,
    ];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

impl TraceContextSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Meta => "meta",
        }
    }
}

impl LabelValue for TraceContextSource {
    const ALL: &'static [Self] = &[Self::Header, Self::Meta];
    fn as_label(self) -> &'static str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<T: LabelValue>() -> Vec<&'static str> {
        T::ALL.iter().map(|v| v.as_label()).collect()
    }

    #[test]
    fn telemetry_owned_label_values_are_the_documented_ones() {
        assert_eq!(labels::<PollResult>(), ["commands", "empty", "error"]);
        assert_eq!(labels::<CommandType>(), ["jsonrpc", "session_termination", "unknown"]);
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
            ["queue", "fence_wait", "downstream", "deliver", "total"]
        );
        assert_eq!(labels::<TraceContextSource>(), ["header", "meta"]);
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
                "warmup"
            ]
        );
    }
}
