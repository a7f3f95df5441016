//! MCP transports: Streamable HTTP and supervised stdio children.
//!
//! Every leg returns a [`LegResult`] whose outcome is `not_sent`, `answered` or
//! `abandoned`; every entry point takes an [`Admission`](crate::strict::Admission), so
//! nothing reaches an MCP server without passing the fence. Must not touch the control
//! plane or the latch: outcomes are reported, the dispatcher decides.

mod outcome;

pub use outcome::{
    LegFailure, LegOutcome, LegResult, Notification, NotifySink, Reply, ABANDONED_MESSAGE, NOT_SENT_MESSAGE,
    REFUSED_MESSAGE,
};
