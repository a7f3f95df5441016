//! The control plane's URLs: the tunnel's path (its id percent-encoded as one segment),
//! and every poll URL, parsed once when the client is built.
//!
//! Invariants: a poll's `limit` is clamped to 1..=[`MAX_POLL_LIMIT`]; its query is
//! `limit`, then `timeout_ms` (at least 1), then one `channel` per configured name, in
//! order; a URL that does not parse fails the client's build, never a poll.

use std::time::Duration;

use super::poll::{PollWait, QUICK_POLL};
use super::BuildError;

/// The most commands one poll may ask for (the contract's `limit` maximum).
const MAX_POLL_LIMIT: usize = 25;

/// Every poll URL: `limit` 1 to [`MAX_POLL_LIMIT`], each with the long and the quick wait,
/// parsed when the client is built.
pub(super) struct PollUrls {
    long_wait: Duration,
    /// Index `2 * (limit - 1)` is the long poll, the next one the quick poll: each
    /// parsed as a URL (the host checked), then kept as hyper's `Uri`.
    uris: Vec<http::Uri>,
}

impl PollUrls {
    pub(super) fn parse(poll_url: &str, filter: &str, long_wait: Duration) -> Result<Self, BuildError> {
        let mut uris = Vec::with_capacity(2 * MAX_POLL_LIMIT);
        for limit in 1..=MAX_POLL_LIMIT {
            for wait in [long_wait, QUICK_POLL] {
                let timeout_ms = wait.as_millis().max(1);
                let url = format!("{poll_url}?limit={limit}&timeout_ms={timeout_ms}{filter}");
                uris.push(uri_of(&url::Url::parse(&url).map_err(|_| BuildError::Url)?)?);
            }
        }
        Ok(Self { long_wait, uris })
    }

    /// The index of a poll asking for `limit` commands (clamped to 1..=25), and its wait.
    fn index(&self, limit: usize, wait: PollWait) -> (usize, Duration) {
        let base = 2 * (limit.clamp(1, MAX_POLL_LIMIT) - 1);
        match wait {
            PollWait::Long => (base, self.long_wait),
            PollWait::Quick => (base + 1, QUICK_POLL),
        }
    }

    /// The target of a poll asking for `limit` commands (clamped to 1..=25), and its wait.
    pub(super) fn target(&self, limit: usize, wait: PollWait) -> (&http::Uri, Duration) {
        let (i, wait) = self.index(limit, wait);
        (&self.uris[i], wait)
    }
}

/// hyper's `Uri` of a parsed URL, parsed from its serialisation.
pub(super) fn uri_of(url: &url::Url) -> Result<http::Uri, BuildError> {
    http::Uri::try_from(url.as_str()).map_err(|_| BuildError::Url)
}

/// `&channel=A&channel=B` for `channels`, each value percent-encoded; `""` for none.
pub(super) fn poll_filter<S: AsRef<str>>(channels: &[S]) -> String {
    channels
        .iter()
        .map(|name| format!("&channel={}", percent_encode_segment(name.as_ref())))
        .collect()
}

/// Percent-encodes a path segment (tunnel ids are opaque).
pub(super) fn percent_encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_filter_is_one_channel_parameter_per_name_and_nothing_without_names() {
        assert_eq!(poll_filter::<&str>(&[]), "");
        assert_eq!(poll_filter(&["harpoon", "main"]), "&channel=harpoon&channel=main");
        assert_eq!(poll_filter(&["a b"]), "&channel=a%20b");
    }

    #[test]
    fn every_poll_url_is_parsed_once_with_its_limit_wait_and_filter() {
        let urls = PollUrls::parse(
            "http://cp.example/v1/tunnels/t/poll",
            "&channel=a",
            Duration::from_secs(30),
        )
        .expect("parses");
        let (url, wait) = urls.target(7, PollWait::Long);
        assert_eq!(
            url.to_string(),
            "http://cp.example/v1/tunnels/t/poll?limit=7&timeout_ms=30000&channel=a"
        );
        assert_eq!(wait, Duration::from_secs(30));
        let (url, wait) = urls.target(0, PollWait::Quick);
        assert_eq!(
            url.to_string(),
            "http://cp.example/v1/tunnels/t/poll?limit=1&timeout_ms=1&channel=a"
        );
        assert_eq!(wait, QUICK_POLL);
        assert_eq!(
            urls.target(99, PollWait::Long).0.query(),
            Some("limit=25&timeout_ms=30000&channel=a")
        );
    }

    #[test]
    fn tunnel_ids_are_encoded_as_one_segment() {
        assert_eq!(percent_encode_segment("tunnel_abc-1"), "tunnel_abc-1");
        assert_eq!(percent_encode_segment("a/b?c"), "a%2Fb%3Fc");
    }
}
