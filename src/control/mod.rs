//! The control-plane client: the long poll and response delivery.
//!
//! Owns the wire conversation with the tunnel service: request headers, the poll's
//! receipt time, retry policy for response POSTs (identical bytes on every attempt),
//! and classification of each attempt into a typed [`Delivery`], and the poll loop with its
//! backoff ([`Poller`]). The poll, the response POST and the tunnel lookup go through the
//! gateway's one HTTP client (`egress::client`). Must not touch MCP servers, the fence
//! or anything of strict mode: it reports, the dispatcher decides.

mod attempt;
pub(crate) mod backoff;
mod client;
#[cfg(test)]
mod exhaustion_tests;
mod poller;
#[cfg(test)]
mod refusal_tests;
mod retry;
#[cfg(test)]
mod timing_tests;
#[cfg(test)]
pub(crate) mod transport_tests;

pub(crate) use attempt::{AttemptResult, Delivery, PostKind, Refused};
#[cfg(test)]
pub(crate) use client::PollWait;
pub(crate) use client::{
    random_hex, BuildError, ControlSettings, DeliveryReport, PollError, PollErrorKind, Polled, ServerInfoSource,
};
pub use client::{ControlClient, LookupError};
pub(crate) use poller::{PollSink, Poller};
