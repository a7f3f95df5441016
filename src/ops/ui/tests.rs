use super::render::escape;
use super::*;

#[test]
fn escape_replaces_markup_quotes_and_ampersands() {
    assert_eq!(
        escape("<script>alert(\"x\" + 'y')</script> & done"),
        "&lt;script&gt;alert(&quot;x&quot; + &#39;y&#39;)&lt;/script&gt; &amp; done"
    );
    assert_eq!(escape("&amp;"), "&amp;amp;");
    assert_eq!(escape("plain text: ok"), "plain text: ok");
    assert_eq!(escape(""), "");
}

#[test]
fn loopback_hosts_are_localhost_127_slash_8_and_ipv6_loopback_with_or_without_a_port() {
    let table = [
        ("localhost", true),
        ("LOCALHOST:9464", true),
        ("127.0.0.1", true),
        ("127.0.0.1:9464", true),
        ("127.1.2.3:80", true),
        ("[::1]", true),
        ("[::1]:9464", true),
        ("evil.example", false),
        ("evil.example:9464", false),
        ("localhost.evil.example", false),
        ("10.0.0.5:9464", false),
        ("[::2]:9464", false),
        ("[::1", false),
        ("[::1]x", false),
        ("127.0.0.1:notaport", false),
        ("::1", false),
        ("", false),
    ];
    for (host, loopback) in table {
        assert_eq!(is_loopback_host(host), loopback, "{host:?}");
    }
}

fn headers(host: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(host) = host {
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
    }
    h
}

#[test]
fn without_allow_remote_a_remote_peer_is_refused_everywhere_and_a_foreign_host_on_page_routes() {
    let local: Option<SocketAddr> = Some("127.0.0.1:5000".parse().unwrap());
    let mapped: Option<SocketAddr> = Some("[::ffff:127.0.0.1]:5000".parse().unwrap());
    let remote: Option<SocketAddr> = Some("192.0.2.7:5000".parse().unwrap());
    let ok = headers(Some("127.0.0.1:9464"));
    let evil = headers(Some("evil.example:9464"));
    for path in ["/ui", "/ui/app.js", "/ui/style.css", "/status", "/events"] {
        assert_eq!(refusal(false, local, path, &ok), None, "{path}");
        assert_eq!(refusal(false, mapped, path, &ok), None, "{path}");
        assert!(
            refusal(false, local, path, &evil).unwrap().contains("Host header"),
            "{path}"
        );
        assert!(
            refusal(false, local, path, &headers(None))
                .unwrap()
                .contains("Host header"),
            "{path}"
        );
        assert!(
            refusal(false, remote, path, &ok)
                .unwrap()
                .contains("loopback clients only"),
            "{path}"
        );
        assert!(refusal(false, None, path, &ok).is_some(), "{path}");
        assert_eq!(refusal(true, remote, path, &evil), None, "{path}");
    }
    for path in ["/livez", "/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            refusal(false, local, path, &evil),
            None,
            "probes keep their Host: {path}"
        );
        assert!(refusal(false, remote, path, &ok).is_some(), "{path}");
        assert_eq!(refusal(true, remote, path, &evil), None, "{path}");
    }
}

#[test]
fn the_clear_command_names_the_latch_file_and_with_coordination_the_configuration() {
    let mut page = PageSettings {
        allow_remote: false,
        latch_file: "/var/lib/tunnelgate/latch.json".into(),
        coordinated: false,
    };
    assert_eq!(
        page.clear_command(),
        "tunnelgate latch clear --latch-file /var/lib/tunnelgate/latch.json"
    );
    assert_eq!(
        page.show_command(),
        "tunnelgate latch show --latch-file /var/lib/tunnelgate/latch.json"
    );
    page.coordinated = true;
    assert_eq!(
        page.clear_command(),
        "tunnelgate latch clear --config CONFIG.toml --latch-file /var/lib/tunnelgate/latch.json"
    );
}

fn events() -> serde_json::Value {
    serde_json::json!({"capacity": 2000, "held": 2, "dropped": 0, "bytes": 10, "events": [
        {"time": "2026-12-01T12:00:00.000001Z", "level": "INFO", "target": "tunnelgate::app",
         "message": "ops listener ready", "fields": [{"name": "addr", "value": "127.0.0.1:9464"}]},
        {"time": "2026-12-01T12:00:01.000001Z", "level": "WARN", "target": "tunnelgate::downstream",
         "message": "child <script>x</script> exited", "fields": []},
    ]})
}

#[test]
fn the_render_escapes_every_server_text_and_shows_the_parts() {
    let doc = serde_json::json!({
        "version": "1.2.3", "mode": "strict", "state": "fatal", "ready": false,
        "not_ready_reason": "fatal latch set (ack_not_found) <b>",
        "fence": {"held": true, "leg": "deliver", "request_id": "req_<1>", "channel": "main", "held_seconds": 2.25},
        "fatal": {"category": "ack_not_found", "exit_code": 82, "request_id": "req_<1>", "channel": "main",
                  "method": "tools/call", "latched_at": "2026-12-01T12:00:00Z", "persisted": true},
        "control_plane": {"last_successful_poll_at": null, "last_successful_poll_age_seconds": null,
                          "consecutive_poll_errors": 0, "last_poll_error_kind": null, "last_acked_at": null},
        "downstream": [{"channel": "main", "transport": "stdio", "up": false, "generation": 2, "session": "down",
                        "server": {"name": "<script>alert('x')</script>", "version": null},
                        "last_command_at": null, "last_success_at": null}],
        "commands": {"in_flight": 1, "queued": 0},
        "outcomes": {"received": 3, "legs": {"answered": 2, "abandoned": 1}, "deliveries": {"acked": 2},
                     "notifications": {}, "dropped": {"invalid": 0}},
    });
    let commands = render::LatchCommands {
        show: "tunnelgate latch show --latch-file /tmp/a&b/latch.json".to_owned(),
        clear: "tunnelgate latch clear --latch-file /tmp/a&b/latch.json".to_owned(),
    };
    let html = render::page(&doc, &events(), &commands);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<b>"), "{html}");
    assert!(
        html.contains("<code id=\"clear-command\">tunnelgate latch clear --latch-file /tmp/a&amp;b/latch.json</code>")
    );
    assert!(html.contains("<dd id=\"latch-exit-code\">82</dd>"), "{html}");
    assert!(html.contains("<dd id=\"fence-held\">held</dd>"), "{html}");
    assert!(
        html.contains("<dd id=\"fence-request-id\">req_&lt;1&gt;</dd>"),
        "{html}"
    );
    assert!(
        html.contains("<dd id=\"fence-held-for\">2.2 s</dd>") || html.contains("2.3 s"),
        "{html}"
    );
    assert!(html.contains("<dd id=\"outcomes-legs-abandoned\">1</dd>"), "{html}");
    assert!(
        html.contains("<td class=\"c-state\">down (session down)</td>"),
        "{html}"
    );
    assert!(
        html.contains("<section id=\"latch\"><h2>"),
        "shown when latched: {html}"
    );
    assert!(html.contains("<section id=\"coordination\" hidden>"), "{html}");
    assert!(html.contains("This page performs no actions."), "{html}");
    // The newest event first, its markup escaped, the older one's fields as name=value.
    let newest = html
        .find("child &lt;script&gt;x&lt;/script&gt; exited")
        .expect("the newest event");
    let oldest = html
        .find("<td class=\"e-fields\">addr=127.0.0.1:9464</td>")
        .expect("the older event");
    assert!(newest < oldest, "{html}");
    assert!(html.contains("<span id=\"events-held\">2</span> held of"), "{html}");
    // The only script is the page's own file: nothing inline, no other origin.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(html.contains("<script src=\"/ui/app.js\" defer></script>"));
    assert!(!html.contains("style=") && !html.contains("http"), "{html}");
}

#[test]
fn with_coordination_the_render_shows_the_role_the_holder_and_a_cluster_wide_latch() {
    let doc = serde_json::json!({
        "version": "1.2.3", "mode": "strict", "state": "standby", "ready": false,
        "not_ready_reason": "standby (the active replica is gw-<a>)",
        "fence": {"held": false, "leg": null, "request_id": null, "channel": null, "held_seconds": null},
        "fatal": null, "control_plane": {}, "downstream": [], "commands": {}, "outcomes": {}, "recent_receipts": [],
        "coordination": {"backend": "etcd", "role": "standby", "holder": "gw-<a>", "lease_ttl_seconds": 10.0,
                         "unsettled": 2, "step_downs": 1, "holding_off_seconds": 4.0,
                         "control_plane_reachable": true,
                         "latch": {"category": "ack_timeout", "latched_by": "gw-<a>"}},
    });
    let commands = render::LatchCommands {
        show: "show".to_owned(),
        clear: "clear".to_owned(),
    };
    let html = render::page(&doc, &events(), &commands);
    assert!(html.contains("<span id=\"state\">standby</span>"), "{html}");
    assert!(html.contains("<section id=\"coordination\"><h2>"), "{html}");
    assert!(html.contains("<dd id=\"coordination-role\">standby</dd>"), "{html}");
    assert!(
        html.contains("<dd id=\"coordination-holder\">gw-&lt;a&gt;</dd>"),
        "{html}"
    );
    assert!(html.contains("<dd id=\"coordination-lease-ttl\">10.0 s</dd>"), "{html}");
    assert!(html.contains("<dd id=\"coordination-unsettled\">2</dd>"), "{html}");
    assert!(html.contains("<dd id=\"coordination-step-downs\">1</dd>"), "{html}");
    assert!(
        html.contains("<dd id=\"coordination-holding-off\">4.0 s</dd>"),
        "{html}"
    );
    assert!(html.contains("<dd id=\"coordination-cp-reachable\">yes</dd>"), "{html}");
    // A cluster-wide latch shows the latch section even without a local cause.
    assert!(html.contains("<section id=\"latch\"><h2>"), "{html}");
    assert!(html.contains("<dd id=\"latch-cluster\">ack_timeout</dd>"), "{html}");
    assert!(html.contains("<dd id=\"latch-cluster-by\">gw-&lt;a&gt;</dd>"), "{html}");
    assert!(html.contains("<p id=\"reason\">not ready: standby (the active replica is gw-&lt;a&gt;)</p>"));
}

#[test]
fn health_serves_loopback_peers_only_even_with_allow_remote() {
    let remote: Option<std::net::SocketAddr> = Some("10.1.2.3:5555".parse().unwrap());
    let local: Option<std::net::SocketAddr> = Some("127.0.0.1:5555".parse().unwrap());
    for path in ["/health", "/health/mcp"] {
        assert!(refusal(true, remote, path, &headers(None))
            .unwrap()
            .contains("/health serves loopback"));
        assert_eq!(refusal(true, local, path, &headers(None)), None, "{path}");
    }
    assert_eq!(
        refusal(true, remote, "/status", &headers(None)),
        None,
        "others as before"
    );
}
