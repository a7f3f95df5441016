//! The binary's view of the gateway: every item the operator commands (`cli`, `doctor`,
//! `bundle`, `demo`, in the crate's binary, `src/main.rs`) take from the library, named one
//! by one under the module it lives in. The binary names these modules as its own
//! (`use tunnelgate::operator::{app, config, ...}` in `src/main.rs`), so its modules read
//! `crate::strict::latch_file::read` as they did when they were modules of the library.
//!
//! Not an API: hidden, and no promise to embedders, whose API is the crate root. An item
//! is here only because a command uses it (the items are `pub` in their modules for this
//! reason alone, and `pub(crate)` otherwise); the integration tests do not import it
//! (`tests/it/architecture/operator.rs` holds both).

/// The gateway's assembly.
pub mod app {
    pub use crate::app::{
        build_control, channel_headers, gateway_metrics, harpoon_settings, session_settings, Gateway, GatewayError,
        RunFile, RunOutcome, StatusHandle, StopHandle,
    };
}

/// Configuration.
pub mod config {
    pub use crate::config::{
        convert_profile, ChannelConfig, Config, ConfigError, ConfigOrigin, EtcdConfig, LogFormat, OfflineConfig,
        Overrides, ProfileError, ProfileFlags, Receipts, StdioSession,
    };
}

/// The control plane's client.
pub mod control {
    pub use crate::control::{ControlClient, LookupError};
}

/// Strict mode across replicas.
pub mod coord {
    pub use crate::coord::{clear_cluster, client, read_cluster, ClusterRecord, Keys};
    pub use tunnelgate_etcd as etcd;
}

/// The process's descriptors.
pub mod descriptors {
    pub use crate::descriptors::{prepare_for_run, EXHAUSTION_WORDS};
}

/// The MCP servers' transports.
pub mod downstream {
    pub use crate::downstream::{
        DownstreamRequest, HarpoonTransport, HttpEgress, HttpSettings, HttpTransport, LegFailure, LegResult,
        NotifySink, SessionSettings, StdioSettings, StdioTransport,
    };
    /// A stdio child's guard process.
    pub mod stdio_guard {
        pub use crate::downstream::stdio_guard::dispatch;
    }
}

/// The ops listener.
pub mod ops {
    pub use crate::ops::{bind, GatewayState};
}

/// The receipts' journal.
pub mod receipts {
    pub use crate::receipts::{read, rotated_path, Filter, Listed, ReadError, Unclean};
}

/// The gateway's own lines on stderr.
pub mod stderr {
    pub use crate::stderr::line;
}

/// Strict mode: the fence, the latch and the intent record.
pub mod strict {
    pub use crate::strict::{Admission, CommandRef, Fatal, Fence, FileIntents, Intent, IntentError, Unsettled};
    /// The latch file.
    pub mod latch_file {
        pub use crate::strict::latch_file::{clear, read, LatchFileError};
    }
}

/// The stdio children's supervisor.
pub mod supervisor {
    pub use crate::supervisor::Supervisor;
}

/// Logs and metrics.
pub mod telemetry {
    pub use crate::telemetry::{safe_method, safe_token, Accounting, LogRing, Metrics};
    /// Logging.
    pub mod logging {
        pub use crate::telemetry::logging::{init, Format, LogFilter};
    }
}
