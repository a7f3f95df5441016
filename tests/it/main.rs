//! The one integration-test binary: black-box tests against the real `tunnelgate`
//! binary, the simulator and real MCP peers (installed by `scripts/install-peers`).
//!
//! The binary is one crate: an item its sibling modules share is `pub(crate)` (no
//! `unreachable_pub` allowance), and every helper is used by some test (no `dead_code`
//! allowance: a helper nobody calls is deleted). It reaches the gateway as any embedder
//! does, through the crate root (`tunnelgate::...`), the binary, and the wire protocol's
//! crate (`tunnelgate_protocol`).
#![allow(clippy::unwrap_used)]

mod architecture;
mod bad_input;
mod cli;
mod contract;
mod crash;
mod docs;
mod doctor;
mod dropin;
mod eras;
mod eras_http;
mod events;
mod gateway_http;
mod gateway_stdio;
mod gateway_stdio_mux;
mod harness;
mod harpoon;
mod harpoon_templates;
mod headers;
mod health_api;
mod health_receipts;
mod oauth;
mod offline;
mod ops_flood;
mod otlp;
mod peers;
mod profiles;
mod prometheus;
mod proxy;
mod ready;
mod receipts;
mod replicas;
mod replies;
mod require_ready;
mod resp_timing;
mod resume;
mod series;
mod signals;
mod soak;
mod stdio_guard;
mod stdio_sessions;
mod stop;
mod strict;
mod strict_ha;
mod strict_ha_fold;
mod strict_ha_silent;
mod strict_ha_truth;
mod support_bundle;
mod surrogates;
mod tls;
mod too_large;
mod trace;
mod ui;

// Module to come (declare it here when its file exists):
// mod ops;            // /livez /readyz /status /metrics (promtool check metrics)
