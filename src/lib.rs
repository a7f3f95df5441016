//! tunnelgate: a Secure MCP Tunnel client that tells the truth about delivery.
//!
//! Data flows one way: `control::poll -> dispatch -> strict::fence -> downstream ->
//! control::deliver`; `ops` and `telemetry` only observe.

pub mod app;
pub mod cli;
pub mod config;
pub mod control;
pub mod demo;
pub mod dispatch;
pub mod downstream;
pub mod ops;
pub mod protocol;
pub mod sim;
pub mod strict;
pub mod telemetry;

pub use app::{Gateway, GatewayError, RunOutcome, StopHandle};
pub use config::Config;
pub use strict::{Fatal, FatalCategory};
