//! The operator page `/ui` in a real headless Chromium against real gateways: the
//! rendered DOM read over the DevTools protocol ([`cdp`]) for a default gateway serving
//! commands, a strict one held on a latch, one with a stdio channel down and one whose
//! server's name is markup, and a standby replica on a real etcd; a held fence shown
//! live without a reload; the network log (only the page's own origin); the server
//! render without script; the access rules (remote peers, a foreign `Host`) and the
//! page's headers. Each browser case saves a screenshot
//! (`TUNNELGATE_UPDATE_SCREENSHOTS=1` writes them into `docs/images/`).

mod cdp;

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{http_client, python, wait_until, Gateway, Rig, RigOptions, KEY};
use cdp::Browser;

const T: Duration = Duration::from_secs(30);

/// The bound for a status change to reach the open page.
const LIVE: Duration = Duration::from_secs(2);

const MCP_HEADER_CANARY: &str = "MCP-HEADER-CANARY-UI-6602";

fn origin(rig: &Rig) -> String {
    format!("http://127.0.0.1:{}", rig.ops_port)
}

/// A browser on the rig's `/ui`, once the script has refreshed it from `/status`.
async fn open_page(rig: &Rig) -> Browser {
    let mut browser = Browser::launch().await;
    browser.call("Network.enable", json!({})).await;
    browser.open(&format!("{}/ui", origin(rig))).await;
    browser
        .wait_true(
            "the script's first refresh",
            "document.getElementById('refresh').textContent.startsWith('Live')",
            T,
        )
        .await;
    browser
}

/// Every channel row's cells, by class (`c-channel`, `c-state`, ...).
async fn channel_rows(browser: &mut Browser) -> Vec<Value> {
    let rows = browser
        .eval(
            "Array.from(document.querySelectorAll('#channel-rows tr')).map(tr => \
             Object.fromEntries(Array.from(tr.cells).map(td => [td.className, td.textContent])))",
        )
        .await;
    rows.as_array().cloned().unwrap_or_default()
}

fn row<'a>(rows: &'a [Value], channel: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["c-channel"] == channel)
        .unwrap_or_else(|| panic!("no row for {channel}: {rows:?}"))
}

async fn count(browser: &mut Browser, id: &str) -> u64 {
    let text = browser.text(id).await;
    text.as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("#{id} is not a count: {text}"))
}

/// The URLs of every request the page made (`Network.requestWillBeSent`).
fn requested(browser: &Browser) -> Vec<String> {
    browser
        .events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_owned))
        .collect()
}

async fn get(url: &str, host: Option<&str>) -> reqwest::Response {
    let mut request = http_client().get(url);
    if let Some(host) = host {
        request = request.header("Host", host);
    }
    request.send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

#[tokio::test]
async fn a_default_gateway_serving_commands_shows_its_state_fence_channels_and_outcomes() {
    // The answer to `add` is refused (404): a delivery `not_found`, with a receipt.
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"add\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let extra = format!("[mcp.channels.main.headers]\nAuthorization = \"Bearer {MCP_HEADER_CANARY}\"\n");
    let config = rig.config(&RigOptions {
        strict: false,
        extra: &extra,
        ..Default::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    wait_until("ready", T, || async { rig.readyz().await.0 == 200 }).await;
    let calls = [
        rig.enqueue_call("echo", json!({"message": "one"})),
        rig.enqueue_call("add", json!({"a": 2, "b": 3})),
    ];
    for (id, status) in calls.iter().zip([200, 404]) {
        rig.wait("the call's answer", |r| {
            r.responses_for(id).any(|p| p.status == Some(status))
        })
        .await;
    }
    let mut browser = open_page(&rig).await;
    assert_eq!(browser.text("state").await, "ready");
    assert_eq!(browser.text("mode").await, "default");
    assert_eq!(browser.text("reason").await, "ready");
    assert_eq!(browser.text("fence-held").await, "free");
    assert_eq!(browser.eval("document.getElementById('latch').hidden").await, true);
    let rows = channel_rows(&mut browser).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let main = row(&rows, "main");
    assert_eq!(
        (&main["c-transport"], &main["c-state"]),
        (&json!("http"), &json!("up")),
        "{main}"
    );
    assert!(main["c-last-success"].as_str().unwrap().starts_with("20"), "{main}");
    // The counts the script shows are the gateway's own counters.
    browser
        .wait_true(
            "both legs counted",
            "document.getElementById('outcomes-legs-answered').textContent === '2'",
            T,
        )
        .await;
    assert_eq!(count(&mut browser, "outcomes-deliveries-acked").await, 1);
    assert_eq!(count(&mut browser, "outcomes-deliveries-not_found").await, 1);
    let receipts = browser
        .eval(
            "Array.from(document.querySelectorAll('#receipt-rows tr')).map(tr => \
             Object.fromEntries(Array.from(tr.cells).map(td => [td.className, td.textContent])))",
        )
        .await;
    let receipts = receipts.as_array().unwrap();
    assert_eq!(
        receipts.len(),
        1,
        "only the unclean command has a receipt: {receipts:?}"
    );
    assert_eq!(receipts[0]["r-request_id"], calls[1].as_str(), "{receipts:?}");
    assert_eq!(receipts[0]["r-delivery_outcome"], "not_found", "{receipts:?}");
    assert_eq!(receipts[0]["r-leg_outcome"], "answered", "{receipts:?}");
    assert_eq!(count(&mut browser, "outcomes-legs-abandoned").await, 0);
    assert_eq!(count(&mut browser, "outcomes-received").await, 2);
    assert!(browser
        .text("control-plane-last-poll")
        .await
        .as_str()
        .unwrap()
        .starts_with("20"));
    // The recent events are the log ring's, as /events serves them.
    let events = browser
        .eval(
            "Array.from(document.querySelectorAll('#event-rows tr')).map(tr => \
             Object.fromEntries(Array.from(tr.cells).map(td => [td.className, td.textContent])))",
        )
        .await;
    let events = events.as_array().unwrap();
    let ready = format!("addr=127.0.0.1:{}", rig.ops_port);
    assert!(
        events
            .iter()
            .any(|e| e["e-message"] == "ops listener ready" && e["e-fields"] == ready.as_str()),
        "{events:?}"
    );
    let held = count(&mut browser, "events-held").await;
    assert!(held >= events.len() as u64 && !events.is_empty(), "{held} {events:?}");
    // Only the page's own origin was ever asked for anything.
    let urls = requested(&browser);
    let own = format!("{}/", origin(&rig));
    assert!(urls.iter().all(|u| u.starts_with(&own)), "{urls:?}");
    for path in ["/ui", "/ui/app.js", "/ui/style.css", "/status", "/events?limit=50"] {
        assert!(
            urls.contains(&format!("{}{path}", origin(&rig))),
            "{path} not requested: {urls:?}"
        );
    }
    let shot = browser.screenshot("ui-default").await;
    drop(browser);
    // What the page and the status serve carries no secret.
    let html = get(&format!("{}/ui", origin(&rig)), None).await.text().await.unwrap();
    let status = get(&format!("{}/status", origin(&rig)), None)
        .await
        .text()
        .await
        .unwrap();
    let events = get(&format!("{}/events", origin(&rig)), None)
        .await
        .text()
        .await
        .unwrap();
    for canary in [KEY, MCP_HEADER_CANARY] {
        for (what, served) in [("/ui", &html), ("/status", &status), ("/events", &events)] {
            assert!(!served.contains(canary), "{canary} served on {what}");
        }
    }
    assert!(shot.is_file());
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_strict_gateway_held_on_a_latch_shows_the_category_exit_code_and_the_clear_command() {
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let mut first = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let latched = rig.enqueue_call("echo", json!({"message": "latch"}));
    assert_eq!(first.wait_exit(T).await, Some(82), "{}", first.stderr());
    let hold = rig
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut held = rig.spawn_gateway(&hold).await;
    let mut browser = open_page(&rig).await;
    assert_eq!(browser.text("state").await, "fatal");
    assert_eq!(browser.text("mode").await, "strict");
    assert_eq!(
        browser.text("reason").await,
        "not ready: fatal latch set (latched_previously)"
    );
    assert_eq!(browser.eval("document.getElementById('latch').hidden").await, false);
    assert_eq!(browser.text("latch-category").await, "latched_previously");
    assert_eq!(browser.text("latch-exit-code").await, "89");
    assert_eq!(browser.text("latch-request-id").await, latched.as_str());
    // The earlier run's own cause, from the latch file: a 404 for the terminal response.
    assert_eq!(browser.text("latch-persisted-category").await, "ack_not_found");
    assert_eq!(browser.text("latch-persisted-exit-code").await, "82");
    assert_eq!(browser.text("latch-persisted-request-id").await, latched.as_str());
    assert_eq!(browser.text("latch-channel").await, "main");
    assert_eq!(
        browser.text("clear-command").await,
        format!("tunnelgate latch clear --latch-file {}", rig.latch_path().display())
    );
    assert_eq!(
        browser.text("show-command").await,
        format!("tunnelgate latch show --latch-file {}", rig.latch_path().display())
    );
    let latch_text = browser.eval("document.getElementById('latch').textContent").await;
    assert!(
        latch_text.as_str().unwrap().contains("This page performs no actions."),
        "{latch_text}"
    );
    browser.screenshot("ui-latched").await;
    drop(browser);
    held.sigterm();
    assert_eq!(held.wait_exit(T).await, Some(89), "{}", held.stderr());
    let path = rig.latch_path().display().to_string();
    let clear = Gateway::cli(&["latch", "clear", "--latch-file", &path, "--yes"], None, &[], T).await;
    assert_eq!(clear.code, 0, "{clear:?}");
    // The page's clear command is the one that works.
    assert!(!rig.latch_path().exists());
}

#[tokio::test]
async fn a_stdio_channel_down_reads_down_and_a_servers_markup_name_reads_as_text() {
    let rig = Rig::start("").await;
    let marked_name = "<script>window.pwned=1</script><b>bold</b>";
    let echo = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stdio/echo.py");
    let extra = format!(
        "[mcp.channels.broken]\ncommand = [\"/bin/sh\", \"-c\", \"exit 3\"]\n\
         [mcp.channels.marked]\ncommand = [{}, {}, \"--name\", {}]\n",
        json!(python().display().to_string()),
        json!(echo),
        json!(marked_name)
    );
    let config = rig.config(&RigOptions {
        strict: false,
        extra: &extra,
        ..Default::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    wait_until("the marked server's name on /status", T, || async {
        let doc = rig.status().await;
        let channels = doc["downstream"].as_array().cloned().unwrap_or_default();
        channels
            .iter()
            .any(|c| c["channel"] == "marked" && !c["server"].is_null())
            && doc["not_ready_reason"]
                .as_str()
                .is_some_and(|r| r.contains("channel broken"))
    })
    .await;
    let served = rig.status().await;
    let name = served["downstream"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["channel"] == "marked")
        .unwrap()["server"]["name"]
        .clone();
    assert!(
        name.as_str().unwrap().contains("<script>"),
        "the markup reaches /status: {name}"
    );
    let mut browser = open_page(&rig).await;
    assert_eq!(browser.text("state").await, "degraded");
    let reason = browser.text("reason").await;
    assert!(
        reason
            .as_str()
            .unwrap()
            .starts_with("not ready: downstream channel broken (stdio) is "),
        "{reason}"
    );
    let rows = channel_rows(&mut browser).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let broken = row(&rows, "broken");
    assert_eq!(broken["c-transport"], "stdio", "{broken}");
    assert!(broken["c-state"].as_str().unwrap().starts_with("down"), "{broken}");
    let marked = row(&rows, "marked");
    assert_eq!(marked["c-state"], "up (session initialized)", "{marked}");
    assert_eq!(marked["c-server"], format!("{} 0", name.as_str().unwrap()), "{marked}");
    // Text, never markup: no element from the name, and its script never ran.
    assert_eq!(
        browser
            .eval("document.querySelectorAll('main script, main b').length")
            .await,
        0
    );
    assert_eq!(browser.eval("typeof window.pwned").await, "undefined");
    browser.screenshot("ui-stdio-down").await;
    drop(browser);
    // The server render, without script, escapes it too.
    let html = get(&format!("{}/ui", origin(&rig)), None).await.text().await.unwrap();
    assert!(html.contains("&lt;script&gt;window.pwned=1&lt;/script&gt;"), "{html}");
    assert!(!html.contains("<script>window"), "{html}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_command_holding_the_fence_appears_on_the_open_page_within_two_seconds_without_a_reload() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    wait_until("ready", T, || async { rig.readyz().await.0 == 200 }).await;
    let mut browser = open_page(&rig).await;
    assert_eq!(browser.text("fence-held").await, "free");
    // A reload would lose this.
    browser.eval("window.sameDocument = 'yes'").await;
    let slow = rig.enqueue_call("slow", json!({"ms": 6000}));
    rig.wait_stub_calls(1).await;
    assert_eq!(rig.status().await["fence"]["held"], true);
    browser
        .wait_true(
            "the held fence on the page",
            "document.getElementById('fence-held').textContent === 'held'",
            LIVE,
        )
        .await;
    assert_eq!(browser.text("fence-request-id").await, slow.as_str());
    assert_eq!(browser.text("fence-channel").await, "main");
    assert_eq!(browser.text("fence-leg").await, "downstream");
    assert_eq!(browser.text("control-plane-in-flight").await, "1");
    assert_eq!(browser.eval("window.sameDocument").await, "yes");
    browser.screenshot("ui-fence-held").await;
    // And free again once the answer is acknowledged.
    browser
        .wait_true(
            "the fence free again",
            "document.getElementById('fence-held').textContent === 'free'",
            T,
        )
        .await;
    assert_eq!(browser.eval("window.sameDocument").await, "yes");
    drop(browser);
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn the_page_renders_without_script_and_carries_its_security_headers() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    wait_until("ready", T, || async { rig.readyz().await.0 == 200 }).await;
    let page = get(&format!("{}/ui", origin(&rig)), None).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let html = page.text().await.unwrap();
    for part in [
        "<span id=\"state\">ready</span>",
        "<span id=\"mode\">default</span>",
        "<dd id=\"fence-held\">free</dd>",
        "<td class=\"c-channel\">main</td><td class=\"c-transport\">http</td><td class=\"c-state\">up</td>",
        "<dd id=\"outcomes-legs-answered\">0</dd>",
        "<section id=\"latch\" hidden>",
        "<td class=\"e-message\">ops listener ready</td>",
    ] {
        assert!(html.contains(part), "{part} not in:\n{html}");
    }
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
               base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
    for path in ["/ui", "/ui/app.js", "/ui/style.css", "/status", "/events"] {
        let r = get(&format!("{}{path}", origin(&rig)), None).await;
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert_eq!(h["content-security-policy"], csp, "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
    }
    let js = get(&format!("{}/ui/app.js", origin(&rig)), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(!js.contains("innerHTML") && !js.contains("http"), "app.js");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

/// A non-loopback IPv4 address of this machine.
fn own_address() -> std::net::Ipv4Addr {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("hostname -I");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
        .expect("this machine has a non-loopback IPv4 address (hostname -I)")
}

/// A raw `GET path` to `to` from a socket bound to `from`: the status line's code.
async fn status_from(from: std::net::IpAddr, to: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(T, stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    answer[9..12].parse().unwrap_or_else(|_| panic!("not HTTP: {answer}"))
}

#[tokio::test]
async fn a_remote_client_or_a_foreign_host_is_refused_unless_allow_remote() {
    let rig = Rig::start("").await;
    let ops = format!("127.0.0.1:{}", rig.ops_port);
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    // A rebinding page: the right address under another name.
    for path in ["/ui", "/ui/app.js", "/ui/style.css", "/status", "/events"] {
        let r = get(&format!("{}{path}", origin(&rig)), Some("evil.example")).await;
        assert_eq!(r.status(), 403, "{path}");
        assert_eq!(r.headers()["cache-control"], "no-store", "{path}");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("the Host header must name a loopback address"),
            "{path}: {body}"
        );
        assert_eq!(body.lines().count(), 1, "{body}");
    }
    for host in ["localhost", &format!("localhost:{}", rig.ops_port), &ops] {
        assert_eq!(
            get(&format!("{}/ui", origin(&rig)), Some(host)).await.status(),
            200,
            "{host}"
        );
    }
    // The probes keep answering whatever the Host.
    for path in ["/livez", "/healthz", "/readyz", "/metrics"] {
        let r = get(&format!("{}{path}", origin(&rig)), Some("10.1.2.3:9464")).await;
        assert_ne!(r.status(), 403, "{path}");
    }
    // A peer that is not loopback, on the loopback listener: refused on every route.
    let me = own_address();
    for path in ["/ui", "/status", "/livez", "/metrics"] {
        assert_eq!(status_from(me.into(), ops.parse().unwrap(), path).await, 403, "{path}");
    }
    assert_eq!(
        status_from([127, 0, 0, 1].into(), ops.parse().unwrap(), "/ui").await,
        200
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());

    // Listening on every interface needs allow_remote; with it, a remote client is served.
    let open = rig.config(&RigOptions::default_mode()).replace(
        &format!("listen = \"{ops}\""),
        &format!("listen = \"0.0.0.0:{}\"", rig.ops_port),
    );
    let refused = Gateway::cli(&["check"], Some(&open), &[], T).await;
    assert_eq!(refused.code, 78, "{refused:?}");
    assert!(refused.stderr.contains("set ops.allow_remote = true"), "{refused:?}");
    let allowed = open.replace("[ops]\n", "[ops]\nallow_remote = true\n");
    let mut gw = rig.spawn_gateway(&allowed).await;
    let remote = std::net::SocketAddr::from((me, rig.ops_port));
    assert_eq!(status_from(me.into(), remote, "/ui").await, 200);
    let r = get(&format!("http://{remote}/ui"), Some("gw.example:9464")).await;
    assert_eq!(r.status(), 200);
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

/// A strict replica's configuration on `etcd`, with its own ops port and latch file.
fn replica_config(rig: &Rig, etcd: &tunnelgate_test_peers::EtcdPeer, ops: u16, dir: &std::path::Path) -> String {
    let coordination = format!(
        "\n[coordination]\nbackend = \"etcd\"\nlease_ttl = \"2s\"\n[coordination.etcd]\nendpoints = [\"{}\"]\n",
        etcd.url()
    );
    rig.config(&RigOptions {
        extra: &coordination,
        ..RigOptions::default()
    })
    .replace(&format!("127.0.0.1:{}", rig.ops_port), &format!("127.0.0.1:{ops}"))
    .replace(
        &rig.latch_path().display().to_string(),
        &dir.join("latch.json").display().to_string(),
    )
}

#[tokio::test]
async fn a_standby_replica_on_etcd_shows_its_role_and_the_active_holder() {
    let etcd = tunnelgate_test_peers::EtcdPeer::start().await;
    let rig = Rig::start("").await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ops_a = rig.ops_port;
    let ops_b = crate::harness::free_port();
    let role = |ops: u16| async move {
        let doc: Value = get(&format!("http://127.0.0.1:{ops}/status"), None)
            .await
            .json()
            .await
            .unwrap();
        (
            doc["coordination"]["role"].clone(),
            doc["coordination"]["holder"].clone(),
        )
    };
    let mut a = rig
        .spawn_gateway(&replica_config(&rig, &etcd, ops_a, dir_a.path()))
        .await;
    wait_until("a active", T, || async { role(ops_a).await.0 == "active" }).await;
    let mut b = Gateway::run(&replica_config(&rig, &etcd, ops_b, dir_b.path()));
    b.wait_http_ready(&format!("http://127.0.0.1:{ops_b}/livez"), T).await;
    wait_until("b standby", T, || async { role(ops_b).await.0 == "standby" }).await;
    let holder = role(ops_a).await.1;
    let mut browser = Browser::launch().await;
    browser.open(&format!("http://127.0.0.1:{ops_b}/ui")).await;
    browser
        .wait_true(
            "the script's first refresh",
            "document.getElementById('refresh').textContent.startsWith('Live')",
            T,
        )
        .await;
    assert_eq!(browser.text("state").await, "standby");
    assert_eq!(
        browser.eval("document.getElementById('coordination').hidden").await,
        false
    );
    assert_eq!(browser.text("coordination-backend").await, "etcd");
    assert_eq!(browser.text("coordination-role").await, "standby");
    assert_eq!(browser.text("coordination-holder").await, holder);
    assert_eq!(
        browser.text("reason").await,
        format!(
            "not ready: standby (the active replica is {})",
            holder.as_str().unwrap()
        )
    );
    browser.screenshot("ui-standby").await;
    // The active's own page says so too.
    browser.open(&format!("http://127.0.0.1:{ops_a}/ui")).await;
    assert_eq!(browser.text("state").await, "ready");
    assert_eq!(browser.text("coordination-role").await, "active");
    drop(browser);
    for gw in [&mut b, &mut a] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    }
}
