//! Header rules: the MCP header names, the response-header allowlist, the JSON
//! content-type header map and the MCP server-info declaration.

use std::collections::BTreeMap;

use serde::Serialize;

// MCP header names in their canonical spelling, the one `resp_headers` and a command's
// headers carry. Names are case-insensitive: compare them with `eq_ignore_ascii_case`;
// an `http::HeaderMap` takes these spellings as they are and lower-cases them itself.

/// The MCP session a request belongs to.
pub const MCP_SESSION_ID: &str = "Mcp-Session-Id";
/// The MCP protocol revision a request speaks.
pub const MCP_PROTOCOL_VERSION: &str = "Mcp-Protocol-Version";
/// The SSE event id a resumed stream continues after.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";

/// The only response headers copied into `resp_headers`, in their canonical spelling.
pub const RESP_HEADER_ALLOWLIST: [&str; 6] = [
    "Content-Type",
    MCP_SESSION_ID,
    MCP_PROTOCOL_VERSION,
    LAST_EVENT_ID,
    "Access-Control-Expose-Headers",
    "WWW-Authenticate",
];

/// `resp_headers` of a JSON body the gateway writes itself (a synthesized error, a stdio
/// child's line): `Content-Type: application/json`.
pub fn json_resp_headers() -> BTreeMap<String, Vec<String>> {
    BTreeMap::from([("Content-Type".to_owned(), vec!["application/json".to_owned()])])
}

/// Keeps allowlisted headers, minus any named by `Connection` and empty values.
pub fn filter_resp_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> BTreeMap<String, Vec<String>> {
    let connection_named: Vec<String> = headers
        .clone()
        .into_iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()).collect::<Vec<_>>())
        .collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let Some(canonical) = RESP_HEADER_ALLOWLIST.iter().find(|a| a.eq_ignore_ascii_case(name)) else {
            continue;
        };
        if value.is_empty() || connection_named.iter().any(|c| c.eq_ignore_ascii_case(name)) {
            continue;
        }
        out.entry((*canonical).to_owned()).or_default().push(value.to_owned());
    }
    out
}

/// The control-plane wire contract this gateway speaks, sent on every control-plane
/// request as `X-Tunnel-Client-Wire-Protocol-Version` (the contract of
/// `contract/openapi-2026-08-25.json`).
pub const WIRE_PROTOCOL_VERSION: &str = "2026-08-25";

/// One channel in the `X-Tunnel-MCP-Server-Info` declaration, its keys in the contract's
/// order (`name`, `stateless`, `proc_affinity`); a `false` is never written.
#[derive(Debug, Serialize)]
pub struct ServerInfoChannel {
    pub name: String,
    /// The channel takes self-contained requests: any replica may serve any of them
    /// (version 2 of the declaration).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stateless: bool,
    /// A request must reach the process that served the channel's earlier ones (stdio,
    /// and what the gateway keeps for a caller); omitted otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub proc_affinity: bool,
}

#[derive(Serialize)]
struct ServerInfo<'a> {
    version: u8,
    channels: &'a [ServerInfoChannel],
}

/// Compact JSON for `X-Tunnel-MCP-Server-Info`: version 1 while no channel is stateless,
/// version 2 as soon as one is; `None` when it would break the contract's limits (more
/// than 32 channels or 4096 bytes), in which case the header is omitted.
pub fn server_info_header(channels: &[ServerInfoChannel]) -> Option<String> {
    if channels.len() > 32 {
        return None;
    }
    let version = if channels.iter().any(|c| c.stateless) { 2 } else { 1 };
    let json = serde_json::to_string(&ServerInfo { version, channels }).expect("server info serializes");
    (json.len() <= 4096).then_some(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(name: &str, stateless: bool, proc_affinity: bool) -> ServerInfoChannel {
        ServerInfoChannel {
            name: name.to_owned(),
            stateless,
            proc_affinity,
        }
    }

    #[test]
    fn server_info_is_v1_until_a_channel_is_stateless_then_v2_byte_for_byte() {
        // The strings the official client's own tests pin (UPSTREAM-2026 §1.2).
        assert_eq!(
            server_info_header(&[channel("main", false, true), channel("harpoon", false, true)]).unwrap(),
            r#"{"version":1,"channels":[{"name":"main","proc_affinity":true},{"name":"harpoon","proc_affinity":true}]}"#
        );
        assert_eq!(
            server_info_header(&[channel("main", false, true), channel("harpoon", true, true)]).unwrap(),
            r#"{"version":2,"channels":[{"name":"main","proc_affinity":true},{"name":"harpoon","stateless":true,"proc_affinity":true}]}"#
        );
        assert_eq!(
            server_info_header(&[channel("main", false, false), channel("harpoon", true, false)]).unwrap(),
            r#"{"version":2,"channels":[{"name":"main"},{"name":"harpoon","stateless":true}]}"#
        );
        let many: Vec<_> = (0..33).map(|i| channel(&format!("c{i}"), true, false)).collect();
        assert_eq!(server_info_header(&many), None, "more than 32 channels: no header");
    }

    #[test]
    fn only_allowlisted_non_empty_headers_survive() {
        let h = [
            ("content-type", "text/event-stream"),
            ("mcp-session-id", "abc"),
            ("set-cookie", "secret"),
            ("www-authenticate", ""),
            ("Mcp-Protocol-Version", "2025-06-18"),
            ("x-powered-by", "x"),
        ];
        let out = filter_resp_headers(h.iter().copied());
        assert_eq!(
            out.keys().collect::<Vec<_>>(),
            vec!["Content-Type", "Mcp-Protocol-Version", "Mcp-Session-Id"]
        );
    }

    #[test]
    fn headers_named_by_connection_are_dropped() {
        let h = [
            ("Connection", "keep-alive, Mcp-Session-Id"),
            ("Mcp-Session-Id", "abc"),
            ("Content-Type", "application/json"),
        ];
        let out = filter_resp_headers(h.iter().copied());
        assert!(!out.contains_key("Mcp-Session-Id"));
        assert!(out.contains_key("Content-Type"));
    }

    #[test]
    fn multi_valued_headers_are_kept_in_order() {
        let h = [
            ("Access-Control-Expose-Headers", "a"),
            ("access-control-expose-headers", "b"),
        ];
        let out = filter_resp_headers(h.iter().copied());
        assert_eq!(out["Access-Control-Expose-Headers"], vec!["a", "b"]);
    }

    #[test]
    fn server_info_is_compact_and_omits_false_affinity() {
        let chans = [channel("main", false, true), channel("web", false, false)];
        assert_eq!(
            server_info_header(&chans).unwrap(),
            r#"{"version":1,"channels":[{"name":"main","proc_affinity":true},{"name":"web"}]}"#
        );
    }

    #[test]
    fn server_info_respects_the_contract_limits() {
        let long = [channel(&"x".repeat(5000), false, false)];
        assert!(server_info_header(&long).is_none());
    }
}
