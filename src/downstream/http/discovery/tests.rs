//! The pure parts of discovery: candidate URLs, the `WWW-Authenticate` parameter and
//! what counts as metadata.

use super::*;

fn urls(mcp: &str) -> Vec<String> {
    well_known_urls(&Url::parse(mcp).unwrap())
        .into_iter()
        .map(String::from)
        .collect()
}

#[test]
fn the_path_specific_well_known_url_comes_before_the_root_one() {
    assert_eq!(
        urls("https://mcp.example.com/mcp?x=1#f"),
        [
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
            "https://mcp.example.com/.well-known/oauth-protected-resource",
        ]
    );
    assert_eq!(
        urls("http://127.0.0.1:3001/a/b"),
        [
            "http://127.0.0.1:3001/.well-known/oauth-protected-resource/a/b",
            "http://127.0.0.1:3001/.well-known/oauth-protected-resource",
        ]
    );
}

#[test]
fn an_empty_path_or_a_well_known_one_gives_no_duplicate() {
    assert_eq!(urls("https://h/"), ["https://h/.well-known/oauth-protected-resource"]);
    assert_eq!(
        urls("https://h/.well-known/oauth-protected-resource/t"),
        [
            "https://h/.well-known/oauth-protected-resource/t",
            "https://h/.well-known/oauth-protected-resource",
        ]
    );
    assert_eq!(
        urls("https://h/.well-known/oauth-protected-resource"),
        ["https://h/.well-known/oauth-protected-resource"]
    );
}

#[test]
fn resource_metadata_is_read_only_from_a_bearer_challenge() {
    let cases: [(&str, Option<&str>); 7] = [
        (
            r#"Bearer resource_metadata="https://h/.well-known/oauth-protected-resource""#,
            Some("https://h/.well-known/oauth-protected-resource"),
        ),
        (
            r#"Bearer realm="a, b", error="invalid_token", resource_metadata="https://h/prm""#,
            Some("https://h/prm"),
        ),
        (
            r#"Basic realm="x", Bearer resource_metadata=https://h/prm"#,
            Some("https://h/prm"),
        ),
        (r#"Basic resource_metadata="https://h/prm""#, None),
        (r#"Bearer resource_metadata="/relative""#, None),
        (r#"Bearer resource_metadata="file:///etc/passwd""#, None),
        (r#"Bearer realm="x""#, None),
    ];
    for (header, want) in cases {
        assert_eq!(
            resource_metadata_url(header).map(String::from).as_deref(),
            want,
            "{header}"
        );
    }
}

#[test]
fn metadata_needs_an_object_with_a_resource_and_a_usable_first_server() {
    let ok = |s: &str| metadata_document(s.as_bytes().to_vec()).map(|r| r.get().to_owned());
    assert_eq!(
        ok("  {\"resource\":\"https://h/mcp\", \"authorization_servers\":[\"https://as\"]}\n").as_deref(),
        Some("{\"resource\":\"https://h/mcp\", \"authorization_servers\":[\"https://as\"]}"),
        "kept as served, surrounding whitespace trimmed"
    );
    assert!(ok(r#"{"resource":"r"}"#).is_some());
    assert!(ok(r#"{"resource":"r","authorization_servers":[]}"#).is_some());
    for bad in [
        "",
        "[]",
        "not json",
        r#"{"resource":""}"#,
        r#"{"resource":7}"#,
        r#"{"authorization_servers":["https://as"]}"#,
        r#"{"resource":"r","authorization_servers":["not a url"]}"#,
        r#"{"resource":"r","authorization_servers":"https://as"}"#,
        r#"{"resource":"r"} trailing"#,
    ] {
        assert!(ok(bad).is_none(), "{bad}");
    }
}

#[test]
fn redirects_stay_on_the_same_origin() {
    let u = |s: &str| Url::parse(s).unwrap();
    assert!(same_origin(&u("https://h/a"), &u("https://h:443/b")));
    assert!(!same_origin(&u("https://h/a"), &u("http://h/a")));
    assert!(!same_origin(&u("https://h/a"), &u("https://g/a")));
    assert!(!same_origin(&u("http://h:1/a"), &u("http://h:2/a")));
}

#[test]
fn configured_headers_go_only_to_the_mcp_servers_own_origin() {
    let origin = Url::parse("https://mcp.example:8443/mcp").unwrap();
    let mut configured = http::header::HeaderMap::new();
    configured.insert("authorization", "Bearer configured".parse().unwrap());
    let with = OriginHeaders {
        origin: &origin,
        headers: &configured,
    };
    let same = discovery_headers(
        &Url::parse("https://mcp.example:8443/.well-known/oauth-protected-resource/mcp").unwrap(),
        &with,
    );
    assert_eq!(same.get("authorization").unwrap(), "Bearer configured");
    assert_eq!(same.get("accept").unwrap(), "application/json");
    for other in [
        "https://auth.example/.well-known/oauth-protected-resource",
        "http://mcp.example:8443/.well-known/oauth-protected-resource",
        "https://mcp.example/.well-known/oauth-protected-resource",
    ] {
        let headers = discovery_headers(&Url::parse(other).unwrap(), &with);
        assert!(
            !headers.contains_key("authorization"),
            "{other} must not get the channel's headers"
        );
    }
}
