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
//! their signatures and fields name are reachable through them, not by path. Every module is private. Two hidden items serve the
//! crate's own targets and are not an API: `binary_main`, the binary's entry point, and,
//! with the `internals` feature only (the crate's integration tests, fuzz targets,
//! examples and doc tests turn it on), the `internals` module of re-exports.

// Nothing `pub` beyond the surface above. The modules the `internals` surface re-exports,
// or names in its signatures, have no outside path without that feature, so there they
// allow the lint (and dead code and unused re-exports: what only the tests use); every
// `--all-targets` build compiles the feature and holds them to all three.
#![deny(unreachable_pub)]

mod app;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod bundle;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod cli;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod config;
mod control;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod coord;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod demo;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod descriptors;
mod dispatch;
mod doctor;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod downstream;
mod egress;
mod entry;
/// Fuzz and property targets (test and `--cfg fuzzing` builds only; not an API).
#[cfg(any(test, fuzzing))]
mod fuzzing;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod health;
/// The crate's internals for its own tests, fuzz targets and examples (not an API).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod ops;
/// The wire protocol, a crate of its own (`crates/protocol`), under the name the modules
/// use for it.
use tunnelgate_protocol as protocol;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod receipts;
/// A scripted HTTP peer for the crate's own tests.
#[cfg(test)]
mod scripted_peer;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod stderr;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod strict;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod supervisor;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub, dead_code, unused_imports))]
mod telemetry;

pub use app::{Gateway, GatewayError, RunOutcome, StopHandle};
pub use config::{Config, ConfigError, Overrides};
/// The binary's entry point (`src/main.rs`); not an API.
#[doc(hidden)]
pub use entry::binary_main;
pub use strict::{Fatal, FatalCategory};
