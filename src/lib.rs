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
//! starts the bundled simulator and MCP stub, makes the simulator answer the first
//! terminal response with 404, and matches on the cause.
//!
//! ```
//! use std::time::Duration;
//! use tunnelgate::sim::{FaultScript, McpStub, NewCommand, SimConfig, Simulator};
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

pub mod app;
pub mod bundle;
pub mod cli;
pub mod config;
pub mod control;
pub mod coord;
pub mod demo;
pub mod descriptors;
pub mod dispatch;
pub mod doctor;
pub mod downstream;
pub mod egress;
/// Fuzz and property targets (test and `--cfg fuzzing` builds only; not an API).
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod ops;
pub mod protocol;
pub mod receipts;
/// A scripted HTTP peer for the crate's own tests.
#[cfg(test)]
pub(crate) mod scripted_peer;
pub mod sim;
pub mod stderr;
pub mod strict;
pub mod supervisor;
pub mod telemetry;

pub use app::{Gateway, GatewayError, RunOutcome, StopHandle};
pub use config::Config;
pub use strict::{Fatal, FatalCategory};
