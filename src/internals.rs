//! The crate's internals for its own integration tests, fuzz targets, examples and
//! doc tests: one deliberate surface, compiled only with the `internals` feature
//! (which the crate's dev-dependency on itself turns on) and hidden from the docs. It
//! is not an API: nothing here is stable, and an embedder uses the crate root only.
//!
//! Each module here re-exports the `pub` items of the crate module of the same name;
//! it owns nothing and decides nothing.

/// `tunnelgate support-bundle`'s parts and canary scan.
pub mod bundle {
    pub use crate::bundle::*;
}
/// The binary's commands.
pub mod cli {
    pub use crate::cli::*;
}
/// Configuration: loading, validation, newtypes.
pub mod config {
    pub use crate::config::*;
}
/// Strict mode across replicas: the etcd client.
pub mod coord {
    pub use crate::coord::*;
}
/// `tunnelgate demo`.
pub mod demo {
    pub use crate::demo::*;
}
/// The descriptor budget.
pub mod descriptors {
    pub use crate::descriptors::*;
}
/// MCP transports.
pub mod downstream {
    pub use crate::downstream::*;
}
/// Fuzz and property targets (test and `--cfg fuzzing` builds only).
#[cfg(any(test, fuzzing))]
pub mod fuzzing {
    pub use crate::fuzzing::*;
}
/// The ops listener.
pub mod ops {
    pub use crate::ops::*;
}
/// Wire types.
pub mod protocol {
    pub use crate::protocol::*;
}
/// The gateway's own stderr lines.
pub mod stderr {
    pub use crate::stderr::*;
}
/// The fence, the latch and the fatal categories.
pub mod strict {
    pub use crate::strict::*;
}
/// Tracing, metrics and the log ring.
pub mod telemetry {
    pub use crate::telemetry::*;
}
