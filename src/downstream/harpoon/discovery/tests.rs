use std::sync::Arc;

use super::*;
use crate::app::GatewayLabels;
use crate::downstream::HarpoonSettings;
use crate::egress::proxy::ProxySetting;
use crate::telemetry::Metrics;

fn harpoon(register_private_auth_servers: bool) -> HarpoonTransport {
    let settings = HarpoonSettings {
        targets: Vec::new(),
        templates: Vec::new(),
        allow_plaintext_http: true,
        max_response_bytes: 102_400,
        max_redirects: 5,
        classifier: HostClassifier {
            loopback: true,
            private: true,
            suffixes: vec![".internal".into()],
        },
        register_private_auth_servers,
        proxy: ProxySetting::Off,
        tls: crate::egress::tls::TlsFiles::default(),
        version: "test".into(),
        trusted_origins: Vec::new(),
    };
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    HarpoonTransport::new(settings, Arc::default(), metrics).unwrap()
}

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

fn metadata(base: &str) -> (Url, Value) {
    (
        url(&format!("{base}/.well-known/oauth-authorization-server")),
        serde_json::json!({
            "issuer": base,
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/reg"),
            "authorization_endpoint": format!("{base}/auth"),
            "jwks_uri": "https://public.example.com/jwks",
        }),
    )
}

fn labels(h: &HarpoonTransport) -> Vec<String> {
    h.registry().targets().iter().map(|t| t.label.clone()).collect()
}

#[test]
fn an_authorization_server_on_the_mcp_origin_registers_every_row_but_the_authorization_endpoint() {
    let h = harpoon(false);
    let mcp = url("http://127.0.0.1:9000/mcp");
    let group = group_tag(None, Some(&mcp), None);
    let auth = url("http://127.0.0.1:9000");
    let records = bundle(
        &group,
        Some(mcp.clone()),
        Some(auth.clone()),
        None,
        Some(metadata("http://127.0.0.1:9000")),
    );
    let tally = h.register_records(&records, &mcp, Some(&auth), &group);
    assert_eq!(
        labels(&h),
        [
            "oauth-prmd-resource-0",
            "oauth-prmd-auth-server-0",
            "oauth-auth-server-metadata-0",
            "oauth-issuer-0",
            "oauth-token-endpoint-0",
            "oauth-registration-endpoint-0"
        ]
    );
    // The public JWKS URI is on another origin: skipped.
    assert_eq!(tally.skipped, 1);
    assert!(h.is_routable());
    // A second discovery of the same server changes nothing.
    let again = h.register_records(&records, &mcp, Some(&auth), &group);
    assert_eq!((again.added, again.unchanged), (0, 6));
    assert_eq!(h.registry().len(), 6);
}

#[test]
fn a_private_authorization_server_on_another_origin_registers_only_when_asked() {
    let mcp = url("http://127.0.0.1:9000/mcp");
    let auth = url("http://127.0.0.1:9100");
    let group = group_tag(None, Some(&mcp), None);
    let records = bundle(
        &group,
        Some(mcp.clone()),
        Some(auth.clone()),
        None,
        Some(metadata("http://127.0.0.1:9100")),
    );

    let upstream_rules = harpoon(false);
    upstream_rules.register_records(&records, &mcp, Some(&auth), &group);
    assert_eq!(labels(&upstream_rules), ["oauth-prmd-resource-0"]);

    let opted_in = harpoon(true);
    opted_in.register_records(&records, &mcp, Some(&auth), &group);
    let got = labels(&opted_in);
    assert!(got.contains(&"oauth-token-endpoint-0".to_owned()), "{got:?}");
    assert!(got.contains(&"oauth-registration-endpoint-0".to_owned()), "{got:?}");
    assert!(
        !got.iter().any(|l| l.contains("jwks")),
        "a public JWKS URI stays out: {got:?}"
    );
}

#[test]
fn a_public_authorization_server_on_another_origin_is_never_registered_even_when_asked() {
    let h = harpoon(true);
    let mcp = url("http://127.0.0.1:9000/mcp");
    let auth = url("https://idp.example.com");
    let group = group_tag(None, Some(&mcp), None);
    let records = bundle(
        &group,
        Some(mcp.clone()),
        Some(auth.clone()),
        None,
        Some(metadata("https://idp.example.com")),
    );
    h.register_records(&records, &mcp, Some(&auth), &group);
    assert_eq!(labels(&h), ["oauth-prmd-resource-0"]);
}

#[test]
fn the_group_tag_hashes_the_first_url_there_is() {
    let a = group_tag(Some(&url("https://h/.well-known/oauth-protected-resource")), None, None);
    assert!(a.starts_with("group=auth-server:") && a.ends_with(":0") && a.len() == "group=auth-server:".len() + 14);
    assert_eq!(group_tag(None, None, None), group_tag(None, None, None));
    assert_ne!(a, group_tag(None, None, None));
}

#[test]
fn the_classifier_names_loopback_private_and_suffixes_but_not_link_local() {
    let c = HostClassifier {
        loopback: true,
        private: true,
        suffixes: vec![".internal".into()],
    };
    assert_eq!(classify(&c, &url("http://localhost:1/")).as_deref(), Some("loopback"));
    assert_eq!(classify(&c, &url("http://10.1.2.3/")).as_deref(), Some("private-ip"));
    assert_eq!(
        classify(&c, &url("https://auth.internal/")).as_deref(),
        Some("suffix:.internal")
    );
    assert_eq!(
        classify(&c, &url("https://internal/")).as_deref(),
        Some("suffix:.internal")
    );
    assert_eq!(classify(&c, &url("http://169.254.1.1/")), None);
    assert_eq!(classify(&c, &url("https://example.com/")), None);
}

#[test]
fn metadata_urls_insert_the_issuers_path_as_rfc_8414_says() {
    let got: Vec<String> = metadata_urls(&url("https://as.example.com/tenant"))
        .iter()
        .map(Url::to_string)
        .collect();
    assert_eq!(
        got,
        [
            "https://as.example.com/.well-known/oauth-authorization-server/tenant",
            "https://as.example.com/tenant/.well-known/openid-configuration",
            "https://as.example.com/.well-known/openid-configuration/tenant"
        ]
    );
}

/// The roles are upstream's words in registry keys, labels, tags and logs: every one is
/// pinned here, including the four no discovery test above reaches by its label.
#[test]
fn each_role_is_written_as_upstream_writes_it() {
    let written: Vec<&str> = [
        Role::PrmdResource,
        Role::PrmdAuthServer,
        Role::PrmdSource,
        Role::AuthServerMetadata,
        Role::Issuer,
        Role::TokenEndpoint,
        Role::JwksUri,
        Role::IntrospectionEndpoint,
        Role::RegistrationEndpoint,
        Role::RevocationEndpoint,
    ]
    .into_iter()
    .map(Role::as_str)
    .collect();
    assert_eq!(
        written,
        [
            "prmd-resource",
            "prmd-auth-server",
            "prmd-source",
            "auth-server-metadata",
            "issuer",
            "token-endpoint",
            "jwks-uri",
            "introspection-endpoint",
            "registration-endpoint",
            "revocation-endpoint",
        ]
    );
    let protected: Vec<bool> = [Role::PrmdResource, Role::PrmdAuthServer, Role::PrmdSource, Role::Issuer]
        .into_iter()
        .map(Role::is_protected_resource)
        .collect();
    assert_eq!(protected, [true, true, true, false]);
}
