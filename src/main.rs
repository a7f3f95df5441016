//! The `tunnelgate` binary: its allocator and the operator commands (`cli`, `doctor`,
//! `bundle`, `demo`), a crate of their own on the library. `entry` parses the command
//! line, loads configuration, runs, and maps the outcome to an exit code (0 clean, 1
//! unexpected, 2 usage, 3 not ready for `status --require-ready`, 4 refused by
//! `support-bundle`'s secret scan, 78 configuration, 80-91 fatal categories). What the
//! commands take from the gateway is the library's hidden `operator` module, item by item
//! (docs/ARCHITECTURE.md, "Crates").

// As in the library: nothing `pub` that no other crate uses (here: nothing), and every
// function outside tests under 80 lines.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unreachable_pub)]

use std::process::ExitCode;

mod bundle;
mod cli;
mod demo;
mod doctor;
mod entry;

/// The library's modules the commands read, under the names they have there.
use tunnelgate::operator::{
    app, config, control, coord, descriptors, downstream, ops, receipts, stderr, strict, supervisor, telemetry,
};
/// The egress client, a crate of its own (`crates/egress`), under the library's name for it.
use tunnelgate_egress as egress;
/// The wire protocol (`crates/protocol`), under the library's name for it.
use tunnelgate_protocol as protocol;

/// mimalloc by default: on the measured machine the gateway spent less CPU per command
/// with it than with the system allocator (`dist` build; the figures are in
/// docs/PERFORMANCE.md). It is built with `no_thp`: it never madvises its heap into
/// transparent huge pages, which kept its resident memory near the system allocator's;
/// the process's THP setting, inherited by stdio children, is left alone.
/// `--no-default-features` builds with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    entry::main()
}
