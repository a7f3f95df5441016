//! The gateway's own lines on stderr (`tunnelgate: ...`): the latch's one-line cause, a
//! refused start, a configuration error. They are part of the machine-readable fatal
//! contract, kept apart from telemetry, and must never fail the process: SIGPIPE is
//! ignored, so a stderr whose reader is gone fails each write with EPIPE, where
//! `eprintln!` would panic and turn the exit code that says why (78, 8x, 89, 90) into a
//! panic's 101. Imports nothing of the crate.

use std::io::Write;

/// Writes `tunnelgate: {line}` and a newline to stderr; a failed write is dropped.
pub fn line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "tunnelgate: {line}");
}
