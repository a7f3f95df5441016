//! Which headers a leg's requests carry from the command, and which of a response's go
//! back (pure).
//!
//! Invariants:
//! - hop-by-hop headers (and any named by `Connection`), `Proxy-*` and the headers this
//!   transport sets itself are never forwarded; everything else of the command's
//!   connector headers is, multi-valued and in order;
//! - a resume `GET` carries only the command's session, version and authorization
//!   headers ([`RESUME_HEADERS`]);
//! - the posted `resp_headers` pass the protocol's allowlist;
//! - header values are never logged (an invalid value's header name may be; an invalid
//!   name never is).
//!
//! The channel's configured headers are added by [`super::configured`], the transport's
//! own (`Content-Type`, `Accept`, `Last-Event-ID`) by [`super::request`].

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::protocol::{filter_resp_headers, WireHeaders};

/// Request headers never forwarded: hop-by-hop headers and the ones this transport owns
/// (framing, body type, and content codings it does not decode).
const NOT_FORWARDED: [&str; 10] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "accept-encoding",
];

/// Command headers carried on a resume `GET`, lower-cased: they are compared with
/// `HeaderMap` names, which are always lower case.
const RESUME_HEADERS: [&str; 3] = ["mcp-session-id", "mcp-protocol-version", "authorization"];

/// Response headers as posted back (`resp_headers`).
pub(super) type RespHeaders = std::collections::BTreeMap<String, Vec<String>>;

/// The command's connector headers, multi-valued and in order, minus hop-by-hop headers
/// (including any named by `Connection`) and those this transport sets itself.
/// Unrepresentable names or values are skipped.
pub(super) fn forward_headers(wire: &WireHeaders) -> HeaderMap {
    // Headers named by `Connection` are hop-by-hop too (RFC 9110, section 7.6.1).
    let connection_named: Vec<String> = wire
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, values)| values.iter().flat_map(|v| v.split(',')))
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::new();
    for (name, values) in wire {
        let lower = name.to_ascii_lowercase();
        if NOT_FORWARDED.contains(&lower.as_str()) || lower.starts_with("proxy-") || connection_named.contains(&lower) {
            continue;
        }
        let Ok(header) = HeaderName::from_bytes(lower.as_bytes()) else {
            // The name itself is not echoed: it is not a valid header name, so it could be anything.
            tracing::debug!("skipping a connector header with an invalid name");
            continue;
        };
        for value in values {
            match HeaderValue::from_str(value) {
                Ok(value) => {
                    out.append(header.clone(), value);
                }
                Err(_) => {
                    tracing::debug!(header = %lower, "skipping a connector header value that is not valid in HTTP")
                }
            }
        }
    }
    out
}

/// The response's headers as posted back (`resp_headers`): the allowlisted ones, minus
/// any named by `Connection` and empty values; values that are not text are skipped.
pub(super) fn response_headers(headers: &HeaderMap) -> RespHeaders {
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    filter_resp_headers(pairs.iter().copied())
}

/// The command's headers a resume `GET` carries ([`RESUME_HEADERS`]), multi-valued and in
/// order. Unrepresentable names or values are skipped.
pub(super) fn resume_headers(wire: &WireHeaders) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, values) in wire {
        let lower = name.to_ascii_lowercase();
        if !RESUME_HEADERS.contains(&lower.as_str()) {
            continue;
        }
        let Ok(name) = HeaderName::from_bytes(lower.as_bytes()) else {
            continue;
        };
        for value in values {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(name.clone(), value);
            }
        }
    }
    headers
}
