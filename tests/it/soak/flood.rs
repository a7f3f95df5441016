//! The soak's descriptor-exhaustion fault: the gateway's soft and hard descriptor limits
//! are lowered to [`LIMIT`] while it runs (`prlimit --pid`), and waves of [`WAVE`]
//! half-open connections (more than the limit) are held against its ops port for a
//! seeded while each, until the run is over. Without the ops listener's bounds each wave
//! would take every descriptor the command path needs; with them, every invariant of the
//! run still holds, and the peak of the gateway's open descriptors (read from `/proc`)
//! is reported.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// The gateway's soft and hard descriptor limit during the soak.
pub(super) const LIMIT: u32 = 1024;
/// Descriptors that must stay free under the flood (the command path's headroom).
pub(super) const HEADROOM: usize = 64;
/// Connections per wave.
const WAVE: usize = 1_100;
/// The pause between two waves.
const BETWEEN_WAVES: Duration = Duration::from_millis(500);

/// A running flood; [`Flood::stop`] ends it and closes every connection.
pub(super) struct Flood {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<FloodReport>,
}

/// What the flood did.
#[derive(Debug, Default)]
pub(super) struct FloodReport {
    /// Whether the gateway's limits were lowered (`prlimit` installed and allowed).
    pub limited: bool,
    pub waves: usize,
    pub connections: usize,
    /// The most descriptors the gateway held at the end of a wave's connects.
    pub peak_descriptors: usize,
}

impl Flood {
    /// Lowers `pid`'s descriptor limits and starts the waves against `127.0.0.1:ops`,
    /// their pauses drawn from `seed`.
    pub(super) async fn start(pid: u32, ops: u16, seed: u64) -> Flood {
        let limited = tokio::task::spawn_blocking(move || {
            std::process::Command::new("prlimit")
                .args(["--pid", &pid.to_string(), &format!("--nofile={LIMIT}:{LIMIT}")])
                .status()
                .is_ok_and(|s| s.success())
        })
        .await
        .unwrap_or(false);
        let stop = CancellationToken::new();
        let task = tokio::spawn(waves(pid, ops, seed, limited, stop.clone()));
        Flood { stop, task }
    }

    pub(super) async fn stop(self) -> FloodReport {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

async fn waves(pid: u32, ops: u16, seed: u64, limited: bool, stop: CancellationToken) -> FloodReport {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xf100d);
    let mut report = FloodReport {
        limited,
        ..FloodReport::default()
    };
    let addr = format!("127.0.0.1:{ops}");
    while !stop.is_cancelled() {
        let mut held = Vec::with_capacity(WAVE);
        for i in 0..WAVE {
            if stop.is_cancelled() {
                break;
            }
            let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&addr));
            let Ok(Ok(mut conn)) = connect.await else { continue };
            if i % 2 == 0 {
                let _ = conn.write_all(b"GET /status HTTP/1.1\r\nHost: flood\r\n").await;
            }
            held.push(conn);
        }
        report.waves += 1;
        report.connections += held.len();
        let open = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
        report.peak_descriptors = report.peak_descriptors.max(open);
        let hold = Duration::from_millis(rng.random_range(200..1500));
        tokio::select! {
            // cancel-safe: waiting only; the connections close when `held` drops.
            () = stop.cancelled() => {}
            () = tokio::time::sleep(hold) => {}
        }
        drop(held);
        // A breath between waves: the listener is free for a moment, so that the soak's
        // own reads of /metrics and /status get in (within a wave, a new connection only
        // finds a slot when one of the wave's times out).
        tokio::select! {
            // cancel-safe: waiting only.
            () = stop.cancelled() => {}
            () = tokio::time::sleep(BETWEEN_WAVES) => {}
        }
    }
    report
}
