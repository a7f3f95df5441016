//! tunnelgate: a Secure MCP Tunnel client that tells the truth about delivery.
//!
//! Data flows one way: `control::poll -> dispatch -> strict::fence -> downstream ->
//! control::deliver`; `ops` and `telemetry` only observe.
//!
//! # Embedding
//!
//! [`Gateway::run`] returns a [`RunOutcome`]; in strict mode a latch comes back as
//! [`RunOutcome::Fatal`] with a typed, privacy-safe [`Fatal`] cause, so no log, metric
//! or stderr parsing is ever needed. This example is run by `cargo test --doc`: it
//! starts the bundled simulator and MCP stub (test support, not part of the API: see
//! [Public API](#public-api)), makes the simulator answer the first
//! terminal response with 404, and matches on the cause.
//!
//! ```
//! use std::time::Duration;
//! use tunnelgate_sim::{FaultScript, McpStub, NewCommand, SimConfig, Simulator};
//! use tunnelgate::{Config, FatalCategory, Gateway, RunOutcome};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await?;
//!     let mut sim = SimConfig::new("tunnel_doc", "doc-key");
//!     sim.faults = FaultScript::from_toml_str("[[rule]]\nmatch = { resp_type = \"terminal\" }\nstatus = 404\n")?;
//!     let sim = Simulator::start(sim).await?;
//!     let latch = std::env::temp_dir().join(format!("tunnelgate-doc-{}.json", std::process::id()));
//!     let config = Config::from_toml_str(&format!(
//!         r#"
//!         [control_plane]
//!         base_url = "{}"
//!         tunnel_id = "tunnel_doc"
//!         api_key = "doc-key"
//!         [mcp.channels.main]
//!         url = "{}"
//!         [strict]
//!         enabled = true
//!         latch_file = "{}"
//!         [ops]
//!         listen = "127.0.0.1:0"
//!         "#,
//!         sim.base_url(),
//!         stub.url(),
//!         latch.display()
//!     ))?;
//!     sim.enqueue(NewCommand::jsonrpc(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})));
//!
//!     let gateway = Gateway::new(config);
//!     let _stop = gateway.stop_handle(); // call `.stop()` from your own shutdown path
//!     let outcome = tokio::time::timeout(Duration::from_secs(30), gateway.run()).await??;
//!
//!     match outcome {
//!         RunOutcome::Clean => unreachable!("a 404 on the terminal response latches in strict mode"),
//!         RunOutcome::Fatal(fatal) => {
//!             assert_eq!(fatal.category, FatalCategory::AckNotFound);
//!             assert_eq!(fatal.exit_code, 82);
//!             assert_eq!(fatal.method.as_deref(), Some("tools/list"));
//!             assert!(fatal.persisted, "the latch file was written before run() returned");
//!         }
//!     }
//!     std::fs::remove_file(&latch)?;
//!     Ok(())
//! }
//! ```
//!
//! # Public API
//!
//! The crate root is the whole API: [`Gateway`] (with [`StopHandle`] and
//! [`GatewayError`]), [`RunOutcome`], [`Config`] (with [`ConfigError`] and the
//! [`Overrides`] of [`Config::load`]), [`Fatal`] and [`FatalCategory`]; the other types
//! their signatures and fields name are reachable through them, not by path. Every module
//! is private, and there is no feature that opens one. One hidden module serves the crate's
//! own binary (the operator commands, `src/main.rs`) and is not an API: `operator`, which
//! names each item the commands take from the gateway. The integration tests,
//! examples and doc tests use the crate as any embedder does (and the wire protocol as
//! `tunnelgate_protocol`); what they cannot reach is tested by the unit tests beside it.
//! Only a `cargo fuzz` build (`--cfg fuzzing`) sees one more hidden module, `fuzzing`.

// Nothing `pub` beyond the surface above: the compiler holds every other item to
// `pub(crate)` or less.
// Every function outside tests is under 80 lines of code (clippy counts a body's lines,
// blanks and comments aside; the threshold is in clippy.toml). Table-driven tests may be
// longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unreachable_pub)]

mod app;
mod config;
mod control;
mod coord;
mod descriptors;
mod dispatch;
mod downstream;
/// Fuzz and property targets (not an API). `--cfg fuzzing` is a cfg only `cargo fuzz` sets
/// (never a feature a user can turn on): there this module is public, for the targets of
/// `fuzz/` (`tunnelgate::fuzzing::config`, ...). The unit and property tests compile it
/// too; a test build is the crate's own test binary, which no other crate links, so
/// `pub` reaches no one there. Every other build leaves it out.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
mod health;
/// What the crate's own binary (`src/main.rs`: the operator commands) takes from the
/// gateway, item by item; not an API (docs/ARCHITECTURE.md, "Public API").
#[doc(hidden)]
pub mod operator;
mod ops;
/// The gateway's way out (its one HTTP client, proxies, TLS, the URL and proxy settings),
/// a crate of its own (`crates/egress`), under the name the modules use.
use tunnelgate_egress as egress;
/// The wire protocol, a crate of its own (`crates/protocol`), under the name the modules
/// use for it.
use tunnelgate_protocol as protocol;
mod receipts;
/// A scripted HTTP peer for the crate's own tests.
#[cfg(test)]
mod scripted_peer;
mod stderr;
mod strict;
mod supervisor;
mod telemetry;

pub use app::{Gateway, GatewayError, RunOutcome, StopHandle};
pub use config::{Config, ConfigError, Overrides};
pub use strict::{Fatal, FatalCategory};
