//! Reading an HTTP client error's cause chain: what it says about the stage the request
//! failed in, read by type wherever the crates expose one.
//!
//! By type: `is_connect` (hyper-util's connect-phase error), `is_timeout`
//! (`egress::client`'s reading of hyper's and std's timeouts), a unix socket's failed
//! connect (`egress::connect`'s own type), every `std::io::ErrorKind` in the chain
//! (found with `downcast_ref`, also inside wrapped `io::Error`s), and the raw errno of
//! the gateway's own exhaustion (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`: see
//! `crate::descriptors`). By text, only where no type says it (each place names the
//! crate and version it was checked against).
//!
//! Must not decide outcomes: callers map [`SendFacts`] to their own failure kinds.

/// What a send error's cause chain says, read once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendFacts {
    /// Name resolution failed.
    pub(crate) dns: bool,
    /// The failure happened while connecting (TCP or TLS), before any request byte.
    pub(crate) connect: bool,
    /// A timeout ended it (the connect timeout, or an I/O timeout).
    pub(crate) timeout: bool,
    /// The peer refused the TCP connection.
    pub(crate) refused: bool,
    /// The TCP stage itself failed (so a connect failure was not the TLS handshake).
    pub(crate) tcp_stage: bool,
    /// The gateway ran out of descriptors or socket memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`): a local failure, never the peer's.
    pub(crate) exhausted: bool,
    /// A proxy did not open the `CONNECT` tunnel (a non-2xx answer, or it closed or
    /// garbled its answer): nothing of the request was written.
    pub(crate) proxy_refused: bool,
    /// A proxy answered the `CONNECT` with `407 Proxy Authentication Required`.
    pub(crate) proxy_auth: bool,
    /// The server refused the TLS handshake with an alert (a client certificate it
    /// requires is missing, untrusted or expired). With TLS 1.3 the alert may come after
    /// the client has finished its side of the handshake and written the request, but a
    /// server that aborts its handshake never processes application data: nothing was
    /// delivered (see `egress::tls::refused_handshake`).
    pub(crate) tls_refused: bool,
}

impl SendFacts {
    /// The facts given in field order: for classification table tests.
    #[cfg(test)]
    pub(crate) fn given(dns: bool, connect: bool, timeout: bool, refused: bool, tcp_stage: bool) -> Self {
        Self {
            dns,
            connect,
            timeout,
            refused,
            tcp_stage,
            exhausted: false,
            proxy_refused: false,
            proxy_auth: false,
            tls_refused: false,
        }
    }

    /// The same facts, with the server's refusal of the handshake: for table tests.
    #[cfg(test)]
    pub(crate) fn tls_refused(self) -> Self {
        Self {
            tls_refused: true,
            ..self
        }
    }

    /// The same facts, with the gateway's own resources exhausted: for table tests.
    #[cfg(test)]
    pub(crate) fn exhausted(self) -> Self {
        Self {
            exhausted: true,
            ..self
        }
    }

    /// The facts of a send error of the gateway's one client (`egress::client`).
    pub(crate) fn of_send(send: &crate::egress::client::SendError) -> Self {
        let error = send.chain();
        SendFacts {
            // Text only: hyper-util 0.1.21 names the stage "dns error" in its
            // `ConnectError`, a type it does not export; std's getaddrinfo failure,
            // "failed to lookup address information", has the unstable
            // `io::ErrorKind::Uncategorized`, which cannot be matched.
            dns: chain_mentions(error, &["dns error", "failed to lookup address"]),
            connect: send.is_connect(),
            timeout: send.is_timeout(),
            refused: io_kinds(error).contains(&std::io::ErrorKind::ConnectionRefused),
            // Text: hyper-util 0.1.21 names its TCP stage "tcp connect error" in the
            // unexported `ConnectError`; by type: a unix socket's connect. The TLS stage
            // has no type of its own in the chain that this crate depends on.
            tcp_stage: send.is_socket_connect() || chain_mentions(error, &["tcp connect error"]),
            exhausted: crate::descriptors::chain_is_exhaustion(error),
            // Text only: hyper-util 0.1.21's `TunnelError` is not exported; its
            // `Display` is "tunnel error: <what>". Its "failed to create underlying
            // connection" is the TCP connect to the proxy, read by the facts above.
            proxy_refused: chain_mentions(
                error,
                &[
                    "tunnel error: unsuccessful",
                    "tunnel error: unexpected end of file",
                    "tunnel error: io error establishing tunnel",
                    "tunnel error: proxy response headers too long",
                ],
            ),
            proxy_auth: chain_mentions(error, &["tunnel error: proxy authorization required"]),
            tls_refused: crate::egress::tls::refused_handshake(error),
        }
    }
}

/// Every `io::ErrorKind` in the chain, including errors wrapped inside `io::Error`s.
pub(crate) fn io_kinds(error: &(dyn std::error::Error + 'static)) -> Vec<std::io::ErrorKind> {
    crate::descriptors::io_errors(error)
        .into_iter()
        .map(std::io::Error::kind)
        .collect()
}

/// Whether any layer of the chain mentions one of `needles` (lowercase).
pub(crate) fn chain_mentions(error: &(dyn std::error::Error + 'static), needles: &[&str]) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = source {
        let text = err.to_string().to_ascii_lowercase();
        if needles.iter().any(|n| text.contains(n)) {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_kinds_are_found_inside_wrapped_errors() {
        let inner = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let outer = std::io::Error::other(inner);
        let kinds = io_kinds(&outer);
        assert!(kinds.contains(&std::io::ErrorKind::ConnectionRefused), "{kinds:?}");
        assert!(chain_mentions(
            &std::io::Error::other("dns error: no record"),
            &["dns error"]
        ));
        assert!(!chain_mentions(&outer, &["dns error"]));
    }
}
