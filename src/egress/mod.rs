//! The gateway's way out: how its HTTP requests (to the control plane and to HTTP MCP
//! servers) reach a server: through which proxy ([`proxy`]), trusting which roots and
//! presenting which client certificate ([`tls`]), over which connection ([`connect`]:
//! directly, a `CONNECT` tunnel, a forwarding proxy, a unix socket), the one client
//! that sends them ([`client`]), and what its failures say ([`error`]).
//!
//! Owns the rules that turn configuration into a client's connection settings, and the
//! client with its error and response types. Must not decide when or what to send, and
//! must not know commands, the fence or transports: `control` and `downstream` build
//! their clients with it and send through them.

pub(crate) mod client;
pub(crate) mod connect;
pub(crate) mod error;
pub(crate) mod proxy;
pub(crate) mod tls;
