//! Loopback: ports for the processes a test starts, and an HTTP client that never goes
//! through a proxy from the environment.

use std::time::Duration;

/// A port that was free on 127.0.0.1 a moment ago, for a process the test starts to bind.
///
/// Drawn at random from below the kernel's ephemeral range, never from `bind(:0)`: a port
/// from the ephemeral range can be taken, between the draw and the child's bind, by any
/// outgoing connection of the tests running beside this one (a CI run lost a gateway's
/// `ops.listen` to exactly that). Below the range only another test's draw can collide.
pub fn free_port() -> u16 {
    use rand::Rng;
    let (low, _) = ephemeral_range();
    let ceiling = low.min(32_768);
    let floor = ceiling.saturating_sub(12_000).max(1_024);
    let mut rng = rand::rng();
    for _ in 0..64 {
        let port = rng.random_range(floor..ceiling);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("bound socket has an address").port()
}

/// `/proc/sys/net/ipv4/ip_local_port_range`, or Linux's default when unreadable.
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// An HTTP client for loopback: never goes through a proxy from the environment.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("build reqwest client")
}

/// Whether `url` answers HTTP at all (any status counts: the listener is up).
pub async fn http_answers(url: &str) -> bool {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("build reqwest client");
    client.get(url).send().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_drawn_below_the_ephemeral_range() {
        let (low, high) = ephemeral_range();
        assert!(low <= high, "{low}..{high}");
        let port = free_port();
        assert!(
            (1_024..low.min(32_768)).contains(&port),
            "{port} (ephemeral range {low}..{high})"
        );
    }
}
