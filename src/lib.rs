//! tunnelgate: a Secure MCP Tunnel client that tells the truth about delivery.
//!
//! Data flows one way: `control::poll -> dispatch -> strict::fence -> downstream ->
//! control::deliver`; `ops` and `telemetry` only observe.

pub mod control;
pub mod downstream;
pub mod protocol;
pub mod strict;
pub mod telemetry;
