//! `harpoon://<label>` in `call_target` results: every string of a JSON body (at any
//! depth, values and array items, never keys) and every URL in `Location`, `Link` and
//! `Content-Location` that is exactly a target's URL is replaced by its label, as
//! upstream does, so the service learns which endpoints it can reach through the tunnel.
//!
//! Invariants: a body that is not JSON, or in which nothing matched, comes back byte for
//! byte; which label wins for a URL several targets share is the one tagged for the
//! JSON key it sits under, else the oldest; a `resource` value stays when a candidate is
//! the protected resource itself (RFC 9728).
//!
//! Pure.

use serde_json::Value;

use super::registry::{Registry, Target};

/// The tag preferred for a URL found under `key`.
fn preferred_tag(key: &str) -> Option<&'static str> {
    Some(match key {
        "authorization_servers" => "authorization-server",
        "issuer" => "issuer",
        "token_endpoint" => "token-endpoint",
        "registration_endpoint" => "registration-endpoint",
        "revocation_endpoint" => "revocation-endpoint",
        "introspection_endpoint" => "introspection-endpoint",
        "jwks_uri" => "jwks-uri",
        _ => return None,
    })
}

/// The label `value` (found under `key`) is rewritten to, if any (only an http(s) URL
/// can match: a target's URL is one).
fn label_for<'a>(registry: &'a Registry, key: Option<&str>, value: &str) -> Option<&'a str> {
    let candidates: Vec<&Target> = registry.with_url(value).collect();
    let first = candidates.first()?;
    if key == Some("resource")
        && candidates
            .iter()
            .any(|t| t.has_tag("protected-resource-metadata") && t.has_tag("resource"))
    {
        return None;
    }
    let preferred = key
        .and_then(preferred_tag)
        .and_then(|tag| candidates.iter().find(|t| t.has_tag(tag)));
    Some(preferred.unwrap_or(first).label.as_str())
}

/// The body with target URLs rewritten; `None` when it is not JSON or nothing matched.
pub(crate) fn body(registry: &Registry, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(bytes).ok()?;
    if !rewrite_value(registry, None, &mut value) {
        return None;
    }
    serde_json::to_vec(&value).ok()
}

fn rewrite_value(registry: &Registry, key: Option<&str>, value: &mut Value) -> bool {
    match value {
        Value::String(s) => match label_for(registry, key, s) {
            Some(label) => {
                *s = format!("harpoon://{label}");
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| rewrite_value(registry, key, item) | changed),
        Value::Object(map) => map
            .iter_mut()
            .fold(false, |changed, (k, v)| rewrite_value(registry, Some(k), v) | changed),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Whether a response header's value is rewritten.
pub(crate) fn is_rewritten_header(name: &str) -> bool {
    ["location", "link", "content-location"]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
}

/// Each `https?://...` run of `value` that is exactly a target's URL, replaced.
pub(crate) fn header(registry: &Registry, value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = find_url(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '\''))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        match label_for(registry, None, url) {
            Some(label) => out.push_str(&format!("harpoon://{label}")),
            None => out.push_str(url),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn find_url(s: &str) -> Option<usize> {
    match (s.find("http://"), s.find("https://")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let mut r = Registry::default();
        r.register(
            ("token-endpoint".into(), "g".into()),
            "http://127.0.0.1:9/token",
            "",
            vec!["auth-server-metadata".into(), "token-endpoint".into()],
            true,
        )
        .unwrap();
        r.register(
            ("prmd-resource".into(), "g".into()),
            "http://127.0.0.1:9/mcp",
            "",
            vec!["protected-resource-metadata".into(), "resource".into()],
            true,
        )
        .unwrap();
        r
    }

    #[test]
    fn a_json_body_has_its_target_urls_replaced_and_resource_kept() {
        let r = registry();
        let body = br#"{"token_endpoint":"http://127.0.0.1:9/token","authorization_endpoint":"http://127.0.0.1:9/auth","resource":"http://127.0.0.1:9/mcp","list":["HTTP://127.0.0.1:9/token"]}"#;
        let out: Value = serde_json::from_slice(&super::body(&r, body).unwrap()).unwrap();
        assert_eq!(out["token_endpoint"], "harpoon://oauth-token-endpoint-0");
        assert_eq!(out["authorization_endpoint"], "http://127.0.0.1:9/auth");
        assert_eq!(out["resource"], "http://127.0.0.1:9/mcp");
        assert_eq!(out["list"][0], "harpoon://oauth-token-endpoint-0");
    }

    #[test]
    fn a_body_with_nothing_to_rewrite_or_not_json_is_left_alone() {
        let r = registry();
        assert!(super::body(&r, br#"{"a": 1.50}"#).is_none());
        assert!(super::body(&r, b"not json http://127.0.0.1:9/token").is_none());
        assert!(super::body(&r, br#"{"t":"http://127.0.0.1:9/token/"}"#).is_none());
    }

    #[test]
    fn location_and_link_headers_are_rewritten_on_exact_matches() {
        let r = registry();
        assert_eq!(
            header(
                &r,
                "<http://127.0.0.1:9/token>; rel=\"token\", <http://127.0.0.1:9/other>"
            ),
            "<harpoon://oauth-token-endpoint-0>; rel=\"token\", <http://127.0.0.1:9/other>"
        );
        assert!(is_rewritten_header("Location") && !is_rewritten_header("Content-Type"));
    }
}
