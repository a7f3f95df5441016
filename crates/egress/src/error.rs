//! The one error of a request that got no response headers, and what it says: a stable
//! [`SendErrorKind`], read from the cause chain once, that every caller's classification
//! maps to its own outcome (an HTTP leg's failure, a delivery attempt's result, a poll's
//! error, doctor's words).
//!
//! Invariants: the kinds split in two, as hyper's and pingora's do: the connect-phase
//! kinds wrote nothing of the request ([`SendErrorKind::wrote_nothing`]); `timeout` and
//! `lost` may have written it. A handshake the server refused with an alert is `tls`
//! even when the alert followed the client's side of the handshake (TLS 1.3 client
//! authentication): a server that aborts its handshake processes no application data.
//! The kind reading is one pure function (`kind_of`) over the facts of the chain.
//!
//! By type: hyper-util's connect-phase error (`is_connect`), hyper's and std's
//! timeouts, a unix socket's failed connect (`egress::connect`'s own type), every
//! `std::io::ErrorKind` in the chain (also inside wrapped `io::Error`s), rustls' alerts
//! (`egress::tls::refused_handshake`). By text, only where no type says it (each place
//! names the crate and version it was checked against).
//!
//! Must not decide outcomes, and must not know commands, the fence or transports.

/// A request that got no response headers.
#[derive(Debug)]
pub struct SendError {
    error: hyper_util::client::legacy::Error,
    /// The target was `https` (a connect failure past TCP is then the handshake).
    https: bool,
}

/// What a [`SendError`] says about the request's bytes, with a stable label
/// ([`SendErrorKind::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendErrorKind {
    /// Name resolution failed. Nothing was written.
    Dns,
    /// The peer (the target, or the proxy) refused the TCP connection. Nothing was written.
    Refused,
    /// The connect timeout (TCP, `CONNECT` and TLS) ran out. Nothing was written.
    ConnectTimeout,
    /// The TLS handshake failed or the server refused it. Nothing was processed.
    Tls,
    /// A proxy did not open the `CONNECT` tunnel (a non-2xx answer, or it closed or
    /// garbled its answer). Nothing of the request was written.
    ProxyRefused,
    /// A proxy answered the `CONNECT` with `407 Proxy Authentication Required`.
    ProxyAuth,
    /// Another connect-phase failure: the TCP stage, a unix socket's connect, a
    /// connector layer's refusal, no descriptor. Nothing was written.
    Connect,
    /// A timeout below the client after the connection was up: may have been written.
    Timeout,
    /// The connection failed after it was up (reset, closed, a protocol error): may
    /// have been written.
    Lost,
}

/// What the chain of a send error says, read once: the input of [`kind_of`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChainFacts {
    pub(crate) dns: bool,
    /// hyper-util's connect-phase error: the connection was never made.
    pub(crate) connect: bool,
    pub(crate) timeout: bool,
    pub(crate) refused: bool,
    /// The TCP stage (or a unix socket's connect) itself failed.
    pub(crate) tcp_stage: bool,
    pub(crate) proxy_refused: bool,
    pub(crate) proxy_auth: bool,
    /// The server refused the handshake with an alert.
    pub(crate) tls_refused: bool,
}

impl SendErrorKind {
    /// Stable label for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::Refused => "refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::Tls => "tls",
            Self::ProxyRefused => "proxy_refused",
            Self::ProxyAuth => "proxy_auth",
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Lost => "lost",
        }
    }

    /// Nothing of the request reached the server's processing: "not sent".
    pub fn wrote_nothing(self) -> bool {
        match self {
            Self::Dns
            | Self::Refused
            | Self::ConnectTimeout
            | Self::Tls
            | Self::ProxyRefused
            | Self::ProxyAuth
            | Self::Connect => true,
            Self::Timeout | Self::Lost => false,
        }
    }
}

/// The kind the facts of a chain name, for a target that is `https` or not. A refused
/// handshake is named before the connect phase is asked about; in the connect phase a
/// proxy's refusal comes before the TCP facts (a proxy's refused TCP connect is
/// `refused`), and a failure past the TCP stage of an `https` target is the handshake
/// (the connect timeout spans both, and stays `connect_timeout`).
pub(crate) fn kind_of(facts: ChainFacts, https: bool) -> SendErrorKind {
    if facts.dns {
        return SendErrorKind::Dns;
    }
    if facts.tls_refused {
        return SendErrorKind::Tls;
    }
    if !facts.connect {
        return if facts.timeout {
            SendErrorKind::Timeout
        } else {
            SendErrorKind::Lost
        };
    }
    if facts.proxy_auth {
        SendErrorKind::ProxyAuth
    } else if facts.proxy_refused {
        SendErrorKind::ProxyRefused
    } else if facts.refused {
        SendErrorKind::Refused
    } else if facts.timeout {
        SendErrorKind::ConnectTimeout
    } else if facts.tcp_stage || !https {
        SendErrorKind::Connect
    } else {
        SendErrorKind::Tls
    }
}

impl SendError {
    pub(super) fn new(error: hyper_util::client::legacy::Error, https: bool) -> Self {
        Self { error, https }
    }

    /// What the error says about the request's bytes.
    pub fn kind(&self) -> SendErrorKind {
        kind_of(self.facts(), self.https)
    }

    /// The connection was never made (hyper-util's connect phase): nothing was written.
    pub fn is_connect(&self) -> bool {
        self.error.is_connect()
    }

    /// The error with its cause chain, for the TLS readers.
    pub fn chain(&self) -> &(dyn std::error::Error + 'static) {
        &self.error
    }

    /// Every `io::Error` of the cause chain (see [`io_errors`]), for the exhaustion
    /// reader (`descriptors::any_is_exhaustion`).
    pub fn io_errors(&self) -> Vec<&std::io::Error> {
        io_errors(self.chain())
    }

    fn facts(&self) -> ChainFacts {
        let error = self.chain();
        let io = io_errors(error);
        ChainFacts {
            // Text only: hyper-util 0.1.21 names the stage "dns error" in its
            // `ConnectError`, a type it does not export; std's getaddrinfo failure,
            // "failed to lookup address information", has the unstable
            // `io::ErrorKind::Uncategorized`, which cannot be matched.
            dns: mentions(error, &["dns error", "failed to lookup address"]),
            connect: self.is_connect(),
            timeout: io.iter().any(|e| e.kind() == std::io::ErrorKind::TimedOut)
                || layers(error).any(|e| e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout)),
            refused: io.iter().any(|e| e.kind() == std::io::ErrorKind::ConnectionRefused),
            // Text: hyper-util 0.1.21 names its TCP stage "tcp connect error" in the
            // unexported `ConnectError`; by type: a unix socket's connect. The TLS stage
            // has no type of its own in the chain that this crate depends on.
            tcp_stage: layers(error).any(|e| e.is::<super::connect::SocketConnectError>())
                || mentions(error, &["tcp connect error"]),
            // Text only: hyper-util 0.1.21's `TunnelError` is not exported; its
            // `Display` is "tunnel error: <what>". Its "failed to create underlying
            // connection" is the TCP connect to the proxy, read by the facts above.
            proxy_refused: mentions(
                error,
                &[
                    "tunnel error: unsuccessful",
                    "tunnel error: unexpected end of file",
                    "tunnel error: io error establishing tunnel",
                    "tunnel error: proxy response headers too long",
                ],
            ),
            proxy_auth: mentions(error, &["tunnel error: proxy authorization required"]),
            tls_refused: super::tls::refused_handshake(error),
        }
    }
}

/// The error and its causes in words, outermost first (no layer names the URL).
impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, err) in layers(self.chain()).enumerate() {
            if i > 0 {
                f.write_str(": ")?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

/// The chain's layers, outermost first.
fn layers<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

/// Whether any layer of the chain mentions one of `needles` (lowercase).
fn mentions(error: &(dyn std::error::Error + 'static), needles: &[&str]) -> bool {
    layers(error).any(|err| {
        let text = err.to_string().to_ascii_lowercase();
        needles.iter().any(|n| text.contains(n))
    })
}

/// Every `io::Error` in the cause chain of `error`, including errors wrapped inside
/// `io::Error`s, outermost first.
pub fn io_errors<'a>(error: &'a (dyn std::error::Error + 'static)) -> Vec<&'a std::io::Error> {
    let mut found = Vec::new();
    let mut pending: Vec<&(dyn std::error::Error + 'static)> = vec![error];
    while let Some(err) = pending.pop() {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            found.push(io);
            if let Some(inner) = io.get_ref() {
                pending.push(inner);
                continue;
            }
        }
        if let Some(next) = err.source() {
            pending.push(next);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(dns: bool, connect: bool, timeout: bool, refused: bool, tcp_stage: bool) -> ChainFacts {
        ChainFacts {
            dns,
            connect,
            timeout,
            refused,
            tcp_stage,
            ..ChainFacts::default()
        }
    }

    #[test]
    fn each_fact_set_names_one_kind() {
        use SendErrorKind as K;
        let tls_refused = |f: ChainFacts| ChainFacts { tls_refused: true, ..f };
        let proxy = |f: ChainFacts, auth: bool| ChainFacts {
            proxy_refused: !auth,
            proxy_auth: auth,
            ..f
        };
        let cases = [
            (facts(true, true, true, true, true), true, K::Dns),
            (facts(false, false, true, false, false), true, K::Timeout),
            (facts(false, false, false, false, false), true, K::Lost),
            (facts(false, true, true, true, false), true, K::Refused),
            (facts(false, true, true, false, false), true, K::ConnectTimeout),
            (facts(false, true, false, false, true), true, K::Connect),
            (facts(false, true, false, false, false), false, K::Connect),
            (facts(false, true, false, false, false), true, K::Tls),
            // A refused TLS 1.3 client certificate: the alert can follow the write.
            (tls_refused(facts(false, false, false, false, false)), true, K::Tls),
            (tls_refused(facts(false, false, true, false, false)), true, K::Tls),
            (proxy(facts(false, true, false, false, false), true), true, K::ProxyAuth),
            (
                proxy(facts(false, true, false, false, false), false),
                true,
                K::ProxyRefused,
            ),
            // A proxy that refused the TCP connect itself.
            (facts(false, true, false, true, true), true, K::Refused),
        ];
        for (facts, https, want) in cases {
            assert_eq!(kind_of(facts, https), want, "{facts:?}, https {https}");
        }
    }

    #[test]
    fn only_timeout_and_lost_may_have_written_the_request() {
        use SendErrorKind as K;
        let all = [
            K::Dns,
            K::Refused,
            K::ConnectTimeout,
            K::Tls,
            K::ProxyRefused,
            K::ProxyAuth,
            K::Connect,
            K::Timeout,
            K::Lost,
        ];
        let written: Vec<_> = all.into_iter().filter(|k| !k.wrote_nothing()).collect();
        assert_eq!(written, [K::Timeout, K::Lost]);
        let labels: std::collections::BTreeSet<_> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), all.len(), "labels are distinct");
    }

    #[test]
    fn io_errors_are_found_inside_wrapped_errors() {
        let inner = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let outer = std::io::Error::other(inner);
        let kinds: Vec<_> = io_errors(&outer).iter().map(|e| e.kind()).collect();
        assert!(kinds.contains(&std::io::ErrorKind::ConnectionRefused), "{kinds:?}");
        assert!(mentions(&std::io::Error::other("dns error: no record"), &["dns error"]));
        assert!(!mentions(&outer, &["dns error"]));
    }
}
