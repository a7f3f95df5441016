//! Strict mode: the fence, the fatal latch, fatal categories, the persisted latch file and
//! the write-ahead intent.
//!
//! Owns the single source of truth for "may anything more reach an MCP server". Must not
//! touch sockets or child processes: it only mints and refuses admissions, and records
//! the cause.

mod category;
mod fatal;
mod fence;
pub(crate) mod intent;
pub(crate) mod latch_file;

pub use category::FatalCategory;
pub use fatal::CommandRef;
pub use fatal::Fatal;
pub use fence::{Admission, Fence};
pub(crate) use fence::{FenceLeg, FenceSnapshot, Latched, Refusal, Wire};
pub use intent::{FileIntents, Intent, IntentError, Unsettled};
pub(crate) use intent::{IntentFuture, IntentStore};

/// The model checks' explorer (shuttle), shared with the admission line's model check.
#[cfg(test)]
pub(crate) use fence::model_tests::explore as explore_model;
