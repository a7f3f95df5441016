//! The gateway's way out: how its HTTP clients (to the control plane and to HTTP MCP
//! servers) reach a server: through which proxy ([`proxy`]), trusting which roots and
//! presenting which client certificate ([`tls`]).
//!
//! Owns the rules that turn configuration into a `reqwest` client's connection settings.
//! Must not send anything itself, and must not know commands, the fence or transports:
//! `control` and `downstream` build their clients with it.

pub mod proxy;
pub mod tls;
