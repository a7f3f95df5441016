//! The `tunnelgate` binary: its allocator, and the library's entry point, which parses
//! the command line, loads configuration, runs, and maps the outcome to an exit code (0
//! clean, 1 unexpected, 2 usage, 3 not ready for `status --require-ready`, 4 refused by
//! `support-bundle`'s secret scan, 78 configuration, 80-91 fatal categories). The
//! commands stay private to the library (docs/ARCHITECTURE.md, "Public API").

use std::process::ExitCode;

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
    tunnelgate::binary_main()
}
