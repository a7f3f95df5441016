//! The gateway's way out: how its HTTP clients (to the control plane and to HTTP MCP
//! servers) reach a server: through which proxy ([`proxy`]), trusting which roots and
//! presenting which client certificate ([`tls`]), and the direct hyper client both use
//! when no proxy applies ([`direct`]).
//!
//! Owns the rules that turn configuration into a client's connection settings, and the
//! direct client with its error and response wrappers. Must not decide when or what to
//! send, and must not know commands, the fence or transports: `control` and
//! `downstream` build their clients with it and send through them.

pub(crate) mod direct;
pub(crate) mod proxy;
pub(crate) mod tls;
