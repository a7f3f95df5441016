//! tunnelgate-egress: the gateway's way out. How its HTTP requests (to the control
//! plane, to HTTP MCP servers, to etcd) reach a server: through which proxy ([`proxy`]),
//! trusting which roots and presenting which client certificate ([`tls`]), over which
//! connection ([`connect`]: directly, a `CONNECT` tunnel, a forwarding proxy, a unix
//! socket), the one client that sends them ([`client`]), and what its failures say
//! ([`error`]); and the settings it takes, each checked when it is made: the URLs
//! ([`http_url`]), the proxies ([`proxy::ProxySetting`]) and the TLS files
//! ([`tls::TlsFiles`]). A setting it refuses is an [`Invalid`] naming its key.
//!
//! Owns the rules that turn those settings into a client's connections, and the client
//! with its error and response types. Must not decide when or what to send, and must not
//! know commands, the fence, transports or how the configuration is loaded: the
//! gateway's `config` builds the settings, and `control`, `downstream` and `coord`
//! build their clients with them and send through them. It depends on no crate of the
//! gateway (the crate graph holds it: this crate does not depend on `tunnelgate`).
//!
//! Its items are `pub` only where another crate of the workspace uses them;
//! `unreachable_pub` holds the rest private.
#![deny(unreachable_pub)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

pub mod client;
pub mod connect;
pub mod error;
pub mod http_url;
mod invalid;
pub mod proxy;
pub mod tls;

pub use invalid::Invalid;
