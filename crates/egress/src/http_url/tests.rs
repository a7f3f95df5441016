use proptest::prelude::*;

use super::{parse, HttpUrl, UrlRole};

fn problem(value: &str, role: UrlRole) -> String {
    parse("k", value, role)
        .expect_err("should be rejected")
        .problem()
        .to_owned()
}

#[test]
fn accepts_hosts_ports_ipv4_ipv6_and_paths() {
    for url in [
        "http://127.0.0.1:3001/mcp",
        "https://api.openai.com",
        "http://[::1]:8080/x/y",
        "http://mcp-server.internal_zone/mcp?x=1",
        "http://localhost",
    ] {
        assert_eq!(parse("k", url, UrlRole::Endpoint).as_deref(), Ok(url), "{url}");
    }
}

#[test]
fn base_urls_lose_trailing_slashes() {
    assert_eq!(
        parse("k", "https://h.example/p/", UrlRole::Base).as_deref(),
        Ok("https://h.example/p")
    );
    assert_eq!(
        parse("k", "https://h.example/", UrlRole::Base).as_deref(),
        Ok("https://h.example")
    );
}

#[test]
fn each_malformed_part_is_named() {
    let cases = [
        ("localhost:3001/mcp", "has no scheme"),
        ("ftp://h/x", "scheme \"ftp\" is not supported"),
        ("HTTP://h", "scheme \"HTTP\" is not supported"),
        ("http://", "has no host"),
        ("http:///path", "has no host"),
        ("http://:80", "has no host"),
        ("http://h:", "port \"\" is not a number"),
        ("http://h:0", "port \"0\" is not a number"),
        ("http://h:65536", "port \"65536\" is not a number"),
        ("http://h:8x", "port \"8x\" is not a number"),
        ("http://us:pw@h", "must not contain credentials"),
        ("http://h st/x", "contains whitespace"),
        ("http://h/x\n", "contains whitespace"),
        ("http://[::1/x", "unclosed '['"),
        ("http://[zz]:1", "is not an IPv6 address"),
        ("http://[::1]x", "text after the IPv6 host"),
        ("http://h$x/", "characters a host name cannot have"),
        ("http://h/x#frag", "must not have a fragment"),
    ];
    for (url, expected) in cases {
        let got = problem(url, UrlRole::Endpoint);
        assert!(got.contains(expected), "{url}: {got}");
    }
}

#[test]
fn base_urls_reject_queries_and_fragments() {
    assert!(problem("https://h/x?y=1", UrlRole::Base).contains("must not have a query"));
    assert!(problem("https://h?y=1", UrlRole::Base).contains("must not have a query"));
}

#[test]
fn errors_never_quote_the_path_or_query() {
    let got = problem("ftp://h/secret-token?k=canary", UrlRole::Endpoint);
    assert!(!got.contains("canary") && !got.contains("secret-token"), "{got}");
}

proptest! {
    #[test]
    fn never_panics_on_any_input(value in ".{0,40}") {
        let _ = parse("k", &value, UrlRole::Base);
        let _ = parse("k", &value, UrlRole::Endpoint);
    }

    #[test]
    fn well_formed_urls_are_accepted(
        scheme in "https?",
        host in "[a-z0-9][a-z0-9.-]{0,20}",
        port in proptest::option::of(1u16..),
        path in "(/[a-zA-Z0-9_.-]{0,8}){0,3}",
    ) {
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!("{scheme}://{host}{port}{path}");
        prop_assert_eq!(parse("k", &url, UrlRole::Endpoint), Ok(url));
    }
}

#[test]
fn a_parsed_url_knows_its_scheme_and_prints_as_its_text() {
    let https = HttpUrl::endpoint("k", "https://h.example/mcp?x=1").expect("valid");
    assert!(https.is_https());
    assert_eq!(https, "https://h.example/mcp?x=1");
    assert_eq!(format!("{https:?}"), "\"https://h.example/mcp?x=1\"");
    let http = HttpUrl::base("k", "http://h.example/p/").expect("valid");
    assert!(!http.is_https());
    assert_eq!(http.to_string(), "http://h.example/p");
}
