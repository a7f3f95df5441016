//! Strict mode: the fence, the fatal latch, fatal categories and the persisted latch file.
//!
//! Owns the single source of truth for "may anything more reach an MCP server". Must not
//! touch sockets or child processes: it only mints and refuses admissions, and records
//! the cause.

mod category;
mod fatal;
mod fence;
pub mod latch_file;

pub use category::FatalCategory;
pub use fatal::{CommandRef, Fatal};
pub use fence::{Admission, Fence, FenceLeg, FenceSnapshot, LatchObserver, Latched, Refusal, Wire};
