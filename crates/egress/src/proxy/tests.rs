use super::*;

fn env(pairs: &[(&str, &str)]) -> ProxySetting {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    ProxySetting::Env(Box::new(EnvProxies::from_pairs(&pairs).expect("valid proxy variables")))
}

fn url(text: &str) -> Url {
    Url::parse(text).expect("a valid URL")
}

#[test]
fn no_proxy_matching_follows_the_official_clients_rules() {
    // (NO_PROXY, host, port, excluded)
    let table: &[(&str, &str, u16, bool)] = &[
        ("", "example.com", 80, false),
        ("*", "anything.example", 443, true),
        ("example.com", "example.com", 443, true),
        ("example.com", "api.example.com", 443, true),
        ("example.com", "notexample.com", 443, false),
        ("example.com", "example.com.evil", 443, false),
        (".example.com", "example.com", 443, false),
        (".example.com", "api.example.com", 443, true),
        ("*.example.com", "example.com", 443, false),
        ("*.example.com", "a.b.example.com", 443, true),
        ("EXAMPLE.com", "Api.Example.COM", 443, true),
        ("example.com.", "api.example.com", 443, true),
        ("example.com:8443", "example.com", 8443, true),
        ("example.com:8443", "example.com", 443, false),
        ("10.213.0.1", "10.213.0.1", 80, true),
        ("10.213.0.1", "10.213.0.2", 80, false),
        ("10.213.0.0/16", "10.213.7.2", 80, true),
        ("10.213.0.0/16", "10.214.0.2", 80, false),
        ("10.0.0.0/8, internal.corp", "10.1.2.3", 80, true),
        ("10.0.0.0/8, internal.corp", "svc.internal.corp", 80, true),
        ("  a.test ,, b.test  ", "x.b.test", 80, true),
        ("10.213.0.1:8080", "10.213.0.1", 8080, true),
        ("10.213.0.1:8080", "10.213.0.1", 80, false),
        ("fd00::/8", "fd12::1", 443, true),
        ("fd00::/8", "fe80::1", 443, false),
        ("[fd00::1]:443", "fd00::1", 443, true),
        ("::1", "::1", 80, true),
        ("0.0.0.0/0", "192.0.2.1", 80, true),
        ("10.213.0.0/33", "10.213.0.1", 80, false),
        // An address entry never matches a name, nor a name entry an address.
        ("10.213.0.1", "host10.213.0.1", 80, false),
        ("example.com", "10.0.0.1", 80, false),
    ];
    for (list, host, port, excluded) in table {
        assert_eq!(
            NoProxy::parse(list).matches(host, *port),
            *excluded,
            "NO_PROXY={list:?} host={host} port={port}"
        );
    }
}

#[test]
fn loopback_targets_are_named_and_numbered() {
    for (host, loopback) in [
        ("localhost", true),
        ("LOCALHOST.", true),
        ("api.localhost", true),
        ("127.0.0.1", true),
        ("127.9.8.7", true),
        ("[::1]", true),
        ("::1", true),
        ("::ffff:127.0.0.1", true),
        ("10.213.0.2", false),
        ("localhost.example.com", false),
        ("example.com", false),
    ] {
        assert_eq!(is_loopback(host), loopback, "{host}");
    }
}

#[test]
fn environment_proxies_pick_by_scheme_and_skip_loopback_and_no_proxy() {
    let setting = env(&[
        ("HTTPS_PROXY", "http://secure.proxy:3128"),
        ("http_proxy", "plain.proxy:8080"),
        ("ALL_PROXY", "http://all.proxy:1"),
        ("NO_PROXY", "internal.corp,10.0.0.0/8"),
    ]);
    let shown = |target: &str| select(&setting, &url(target)).map(ProxyUrl::shown);
    assert_eq!(shown("https://api.example.com/v1"), Some("http://secure.proxy:3128"));
    assert_eq!(shown("http://mcp.example.com/mcp"), Some("http://plain.proxy:8080"));
    assert_eq!(
        shown("http://127.0.0.1:3000/mcp"),
        None,
        "loopback is never proxied from the environment"
    );
    assert_eq!(shown("https://localhost/mcp"), None);
    assert_eq!(shown("http://[::1]:3000/mcp"), None);
    assert_eq!(shown("https://svc.internal.corp/mcp"), None);
    assert_eq!(shown("http://10.2.3.4/mcp"), None);
    assert_eq!(route(&setting, &url("https://api.example.com")), Route::Tunnel);
    assert_eq!(route(&setting, &url("http://mcp.example.com")), Route::Forward);
    assert_eq!(route(&setting, &url("http://10.2.3.4")), Route::Direct);

    let only_all = env(&[("all_proxy", "http://all.proxy:1")]);
    assert_eq!(
        select(&only_all, &url("https://api.example.com")).map(ProxyUrl::shown),
        Some("http://all.proxy:1")
    );
    let upper_wins = env(&[("HTTPS_PROXY", "http://upper:1"), ("https_proxy", "http://lower:2")]);
    assert_eq!(
        select(&upper_wins, &url("https://a.example")).map(ProxyUrl::shown),
        Some("http://upper:1")
    );
    assert_eq!(select(&env(&[]), &url("https://a.example")), None);
}

#[test]
fn an_explicit_proxy_takes_every_target_and_none_takes_none() {
    let via = ProxySetting::Via(ProxyUrl::new("test", "http://user:pw@proxy.corp:3128").expect("valid"));
    for target in [
        "http://127.0.0.1:3000/mcp",
        "https://localhost/mcp",
        "https://api.example.com",
    ] {
        assert_eq!(
            select(&via, &url(target)).map(ProxyUrl::shown),
            Some("http://proxy.corp:3128")
        );
    }
    assert_eq!(route(&via, &url("http://127.0.0.1:3000/mcp")), Route::Forward);
    assert_eq!(route(&via, &url("https://127.0.0.1:3000/mcp")), Route::Tunnel);
    assert_eq!(
        route(&ProxySetting::Off, &url("https://api.example.com")),
        Route::Direct
    );
    assert!(!format!("{via:?}").contains("pw"), "Debug never shows credentials");
}
