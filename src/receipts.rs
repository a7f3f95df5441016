//! Delivery receipts: a bounded local journal with one JSON line for every command that
//! did not end cleanly, so that an operator paged for an ambiguity rate can list the
//! exact request ids involved (`tunnelgate receipts`; docs/operations.md, "Delivery receipts").
//!
//! Owns three parts, kept apart by what they may do:
//! - the record ([`Receipt`], `record`): pure. What the lifecycle learned about one
//!   command ([`Outcomes`]) becomes a line only when it did not end cleanly; identifiers
//!   go through the latch file's sanitizers (`safe_token`, `safe_method`), and the words
//!   kept are the gateway's own fixed sentences. Never a payload, a body, a header value,
//!   a key or a token.
//! - the journal ([`Journal`], `journal`): the I/O at the edge. The lifecycle hands a
//!   finished command's receipt over with a non-blocking `try_send` to one writer task;
//!   a full queue, or a full or broken disk, drops lines with a counted reason
//!   (`tunnelgate_receipts_dropped_total{reason}`), never the command and never its
//!   time. The file is bounded: [`MAX_FILE_BYTES`] in it and as much in one rotated file.
//! - the reader (`reader`): what `tunnelgate receipts` lists, the rotated file first.
//!
//! Must not touch the control plane, an MCP server, the fence or the latch: receipts are
//! evidence, and losing one changes nothing a command does.

mod journal;
mod reader;
mod record;

pub(crate) use journal::{Journal, Pending};
pub use reader::{read, rotated_path, Filter, Listed, ReadError};
pub(crate) use record::Receipt;
pub use record::Unclean;
