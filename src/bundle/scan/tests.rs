use super::*;

fn kinds(c: &Canaries, text: &str) -> Vec<String> {
    c.find(text).into_iter().map(|l| l.kind).collect()
}

#[test]
fn a_secret_is_found_by_its_kind_and_as_json_escapes_it() {
    let c = Canaries::new()
        .with("the API key", "sk-\"quoted\"-1234")
        .with("short", "abc");
    assert_eq!(c.len(), 2, "the value and its JSON form; the short one is skipped");
    assert_eq!(kinds(&c, "key=sk-\"quoted\"-1234"), ["the API key"]);
    let json = serde_json::json!({"v": "sk-\"quoted\"-1234"}).to_string();
    assert_eq!(kinds(&c, &json), ["the API key"]);
    assert!(kinds(&c, "abc abc sk-quoted").is_empty());
    let leak = &c.find("sk-\"quoted\"-1234")[0];
    assert!(
        !format!("{leak:?}").contains("quoted"),
        "a hit never carries the secret"
    );
}

#[test]
fn pem_private_keys_and_authorization_credentials_are_found_whatever_the_configuration() {
    let c = Canaries::new();
    for key in [
        "-----BEGIN PRIVATE KEY-----",
        "x -----BEGIN RSA PRIVATE KEY-----\n",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    ] {
        assert_eq!(kinds(&c, key), ["a PEM private key"], "{key}");
    }
    assert!(kinds(&c, "-----BEGIN CERTIFICATE-----").is_empty());
    assert!(kinds(&c, "-----BEGIN PUBLIC KEY-----").is_empty());
    let credential = "an Authorization credential (Bearer or Basic)";
    assert_eq!(kinds(&c, "Authorization: Bearer eyJhbGciOi.J9x1"), [credential]);
    assert_eq!(
        kinds(&c, "\"authorization\":\"basic dXNlcjpwYXNzd29yZDE=\""),
        [credential]
    );
    for prose in [
        "basic authentication is refused",
        "Bearer token missing",
        "a bearer of 12 bad news",
        "Authorization = \"env:MCP_TOKEN (set, 21 bytes)\"",
        "nobearer abcdefgh12345678",
    ] {
        assert!(kinds(&c, prose).is_empty(), "{prose}");
    }
}

#[test]
fn pem_bodies_are_searched_line_by_line_and_userinfo_split() {
    let pem = "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oR0Ai7LZ+Lk7oAoGCCqGSM49\nAwEHoUQDQgAE\n-----END EC PRIVATE KEY-----\n";
    assert_eq!(
        pem_body(pem),
        ["MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oR0Ai7LZ+Lk7oAoGCCqGSM49"]
    );
    assert_eq!(userinfo("http://user:p%40ss@proxy:3128/x"), Some(("user", "p%40ss")));
    assert_eq!(userinfo("http://proxy:3128"), None);
    assert_eq!(userinfo("http://user@proxy:3128"), None, "no password, nothing secret");
}

#[test]
fn the_configuration_gives_every_secret_it_resolves_and_names_each_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("client.key");
    let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSECRETKEYLINE0001";
    std::fs::write(
        &key,
        format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"),
    )
    .unwrap();
    let toml = format!(
        r#"
[control_plane]
tunnel_id = "t"
api_key = "sk-API-KEY-CANARY"
proxy = "http://cpuser:PLANE-PROXY-PASS@127.0.0.1:3128"
[control_plane.headers]
X-Gateway-Key = "GATEWAY-KEY-VALUE"
[control_plane.tls]
client_cert = "{cert}"
client_key = "{key}"
[mcp.channels.main]
url = "http://127.0.0.1:1/mcp"
proxy = "http://mcpuser:MCP-PROXY-PASS@127.0.0.1:3128"
[mcp.channels.main.headers]
Authorization = "Token MCP-HEADER-VALUE"
"#,
        cert = dir.path().join("client.pem").display(),
        key = key.display()
    );
    let config = Config::from_toml_str(&toml).unwrap();
    let c = Canaries::of_config(&config);
    let cases = [
        ("sk-API-KEY-CANARY", "the API key (control_plane.api_key)"),
        (
            "GATEWAY-KEY-VALUE",
            "a header value (control_plane.headers.X-Gateway-Key)",
        ),
        (
            "Token MCP-HEADER-VALUE",
            "a header value (mcp.channels.main.headers.Authorization)",
        ),
        ("PLANE-PROXY-PASS", "proxy credentials (control_plane.proxy)"),
        ("MCP-PROXY-PASS", "proxy credentials (mcp.channels.main.proxy)"),
        (body, "key material (control_plane.tls.client_key)"),
    ];
    for (secret, kind) in cases {
        assert_eq!(kinds(&c, &format!("… {secret} …")), [kind], "{secret}");
    }
    assert!(
        kinds(&c, &config.masked()).is_empty(),
        "what check prints is clean:\n{}",
        config.masked()
    );
}
