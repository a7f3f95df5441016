//! A channel's configured headers (`mcp.channels.NAME.headers`, `MCP_EXTRA_HEADERS`) on
//! the requests its transport builds: the POST, the resume `GET` and the session
//! `DELETE`, and on nothing else (each transport holds its own channel's set).
//!
//! The rule, as the official client's: a header the caller sent (the command's connector
//! headers) wins over a configured one of the same name, in any case, so a token the
//! caller passes through still reaches the server. The transport's own headers are never
//! replaced (the configuration rejects their names).

use http::header::HeaderMap;

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
    use http::header::HeaderValue;

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
                    http::header::HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).unwrap(),
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

    /// Through a transport: the POST, the resume `GET` after a cut stream, and the
    /// session `DELETE` each carry the configured headers the caller did not send.
    #[tokio::test]
    async fn every_request_of_a_channel_carries_its_configured_headers() {
        use crate::downstream::{DownstreamRequest, LegOutcome};
        use crate::protocol::JsonRpcPayload;
        use crate::scripted_peer::{sse_head, Act, Server};
        use crate::strict::{CommandRef, Fence};

        let session = [("Mcp-Session-Id", "s-1")];
        let mut cut = sse_head(&session);
        cut.extend_from_slice(
            b"id: ev-1\nretry: 20\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n",
        );
        let mut resumed = sse_head(&session);
        resumed.extend_from_slice(b"id: ev-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n");
        let server = Server::start(vec![
            Act::Parts(vec![cut]),
            Act::Reply(resumed),
            Act::Reply(crate::scripted_peer::reply("204 No Content", &[], b"")),
        ])
        .await;
        let url = crate::egress::http_url::HttpUrl::endpoint("mcp.channels.main.url", &server.url()).unwrap();
        let settings = super::super::HttpSettings {
            connect_timeout: std::time::Duration::from_secs(2),
            request_timeout: std::time::Duration::from_secs(5),
            max_body_bytes: 1 << 20,
        };
        let transport = super::super::HttpTransport::new("main", &url, settings)
            .unwrap()
            .with_headers(map(&[("authorization", "Bearer configured"), ("x-team", "blue")]));
        let fence = Fence::new(false, 1);
        let admission = fence.admit(CommandRef::default()).await.unwrap();
        let payload = JsonRpcPayload::from_raw(
            serde_json::value::RawValue::from_string(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#.to_owned(),
            )
            .unwrap(),
        )
        .unwrap();
        let caller: WireHeaders = vec![
            ("X-Team".to_owned(), vec!["caller".to_owned()]),
            ("Mcp-Protocol-Version".to_owned(), vec!["2025-06-18".to_owned()]),
        ];
        let (tx, _rx) = tokio::sync::mpsc::channel(8);
        let req = DownstreamRequest {
            payload: &payload,
            headers: &caller,
            deadline: None,
        };
        let leg = transport.call(&admission, &req, &tx).await;
        assert_eq!(leg.outcome, LegOutcome::Answered, "{:?}", leg.failure);
        let end = transport.terminate_session(&admission, &caller, None).await;
        assert_eq!(end.reply.resp_code, 204);
        let seen = server.seen();
        let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
        assert_eq!(methods, ["POST", "GET", "DELETE"]);
        for request in &seen {
            assert_eq!(
                request.header("authorization"),
                ["Bearer configured"],
                "{}",
                request.method
            );
        }
        assert_eq!(seen[0].header("x-team"), ["caller"], "the caller's wins on the POST");
        assert!(
            seen[1].header("x-team").is_empty(),
            "nor is the configured one added to the resume"
        );
        assert_eq!(seen[2].header("x-team"), ["caller"], "and on the DELETE");
    }

    #[test]
    fn the_transports_own_headers_are_kept() {
        let configured = map(&[("accept", "text/plain")]);
        let mut request = map(&[("accept", "text/event-stream")]);
        add(&mut request, &configured, &Vec::new());
        assert_eq!(request["accept"], "text/event-stream");
    }
}
