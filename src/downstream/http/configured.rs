//! A channel's configured headers (`mcp.channels.NAME.headers`, `MCP_EXTRA_HEADERS`) on
//! the requests its transport builds: the POST, the resume `GET` and the session
//! `DELETE`, and on nothing else (each transport holds its own channel's set).
//!
//! The rule, as the official client's: a header the caller sent (the command's connector
//! headers) wins over a configured one of the same name, in any case, so a token the
//! caller passes through still reaches the server. The transport's own headers are never
//! replaced (the configuration rejects their names).

use reqwest::header::HeaderMap;

use crate::protocol::WireHeaders;

/// Adds each configured header that neither the caller's headers nor `request` carry.
pub(super) fn add(request: &mut HeaderMap, configured: &HeaderMap, caller: &WireHeaders) {
    for (name, value) in configured {
        let caller_sent = caller.iter().any(|(n, _)| n.eq_ignore_ascii_case(name.as_str()));
        if !caller_sent && !request.contains_key(name) {
            request.insert(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    /// Header names and values, in a table row.
    type Pairs = &'static [(&'static str, &'static str)];

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (n.parse().unwrap(), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn configured_headers_fill_in_what_the_caller_did_not_send() {
        let configured = map(&[("authorization", "Bearer configured"), ("x-team", "blue")]);
        let cases: &[(Pairs, Pairs)] = &[
            (&[], &[("authorization", "Bearer configured"), ("x-team", "blue")]),
            (
                &[("Authorization", "Bearer caller")],
                &[("authorization", "Bearer caller"), ("x-team", "blue")],
            ),
            (
                &[("X-TEAM", "red"), ("authorization", "Bearer caller")],
                &[("authorization", "Bearer caller"), ("x-team", "red")],
            ),
        ];
        for (caller, want) in cases {
            let wire: WireHeaders = caller
                .iter()
                .map(|(n, v)| ((*n).to_owned(), vec![(*v).to_owned()]))
                .collect();
            let mut request = HeaderMap::new();
            for (n, values) in &wire {
                request.insert(
                    reqwest::header::HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).unwrap(),
                    HeaderValue::from_str(&values[0]).unwrap(),
                );
            }
            add(&mut request, &configured, &wire);
            let mut got: Vec<(String, String)> = request
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                .collect();
            got.sort();
            let want: Vec<(String, String)> = want.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
            assert_eq!(got, want, "caller {caller:?}");
        }
    }

    #[test]
    fn a_caller_header_the_request_does_not_carry_still_wins() {
        // The resume GET carries only some caller headers: a configured one the caller
        // sent on the POST is not added to it either.
        let configured = map(&[("x-api-key", "configured")]);
        let wire: WireHeaders = vec![("X-Api-Key".to_owned(), vec!["caller".to_owned()])];
        let mut request = HeaderMap::new();
        add(&mut request, &configured, &wire);
        assert!(request.get("x-api-key").is_none());
    }

    #[test]
    fn the_transports_own_headers_are_kept() {
        let configured = map(&[("accept", "text/plain")]);
        let mut request = map(&[("accept", "text/event-stream")]);
        add(&mut request, &configured, &Vec::new());
        assert_eq!(request["accept"], "text/event-stream");
    }
}
