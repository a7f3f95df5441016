//! tunnelgate-test-peers: test support for the tunnelgate workspace. It starts the real
//! peers the suite tests against, never mocks: a real etcd (Debian's `etcd-server`, and
//! `etcd-client`'s `etcdctl`: on `PATH`, where `scripts/install-peers` puts them) over plain
//! HTTP or over TLS with a client certificate, and a private PKI made with the `openssl`
//! CLI; with what starting them needs: a guard that kills a child's process group on
//! drop ([`ChildGuard`]), free loopback ports ([`free_port`]) and bounded waits
//! ([`wait_until`], [`wait_for`]).
//!
//! Used by the etcd client's tests (`crates/etcd/src/tests/`) and by the gateway's
//! integration tests (`tests/it/`), as a dev-dependency only: one implementation for
//! both. It must not depend on the gateway (`tunnelgate`): whatever needs the
//! gateway's types (such as waiting until the gateway's etcd client is served again)
//! stays beside the tests that use it, written on top of these helpers.
//!
//! Waits poll against a deadline on the tokio clock: real processes run in real time, so
//! no test that starts a peer may run with `start_paused`.
// Every function outside tests is under 80 lines of code (clippy counts a body's lines,
// blanks and comments aside; the threshold is in clippy.toml). Table-driven tests may be
// longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unreachable_pub)]

mod etcd;
mod net;
mod pki;
mod process;
mod wait;

pub use etcd::EtcdPeer;
pub use net::{free_port, http_answers, http_client};
pub use pki::{Pair, Pki};
pub use process::{tail, ChildGuard};
pub use wait::{wait_for, wait_for_every, wait_until, POLL_INTERVAL};
