//! The operator surface proven against the real Prometheus and Alertmanager (Debian's
//! `prometheus` 2.42 and `prometheus-alertmanager` 0.25, installed by
//! `scripts/install-peers`), all on 127.0.0.1 with temporary folders:
//!
//! - gateway A (default mode) against the simulator, with channels that produce every
//!   leg outcome (`answered` over HTTP and stdio, `not_sent`, `abandoned`) and a fault
//!   script that produces every terminal delivery outcome (`acked`, `not_found`,
//!   `rejected`, `ambiguous`);
//! - gateway B (strict) latches on a 404 (exit 82) and is restarted with
//!   `strict.latched_start = "hold"`;
//! - Prometheus scrapes both (job `tunnelgate`, 1 s) with the repository's rules file,
//!   and sends to Alertmanager, which posts to a webhook this test runs.
//!
//! Asserted: Prometheus scrapes every delivery, attempt and leg outcome; every dashboard
//! expression (Grafana's variables substituted: `$job`, `$instance` = gateway A,
//! `$__rate_interval` = 4 s) is accepted and returns series from the live scrape, and the
//! `$job`/`$instance` variables offer `tunnelgate` and gateway A. Only one panel is empty
//! on a healthy gateway: `tunnelgate_fatal_info` exists only while latched, so it is
//! checked on gateway B after the latch. The others need no more than gateway A has: the
//! stdio panels need a configured stdio channel (gateway A has one), "Time since last
//! successful poll" a successful poll, the reconciliation tables (non-acked deliveries
//! by kind and outcome, abandoned legs by transport) the outcomes gateway A produced,
//! which they must list; every other series, the latency histogram's buckets included,
//! exists at zero from startup (`tests/it/series.rs`). An expression that queries a
//! metric this build does not export yet (`series::AWAITED`) is still sent to Prometheus,
//! which must accept it, and is named on stderr as not checked for series; once such a
//! metric is exported the test fails until the list is emptied. So is one that exists only
//! with the etcd coordination backend (`series::COORDINATED`: the "Coordination" row),
//! which gateways A and B run without. Every rule of the
//! file loads, evaluates healthy and its expression is accepted by `/api/v1/query`;
//! `TunnelgateDeliveryAmbiguity` goes pending on real data, and a time-scaled copy of it
//! fires and clears; `TunnelgateFatalLatch` fires for the held gateway with
//! the category of the persisted cause (`category="ack_not_found"`, not
//! `latched_previously`) and reaches the webhook through Alertmanager.
//!
//! Why a time-scaled copy: the real rule has `for: 5m` over `[15m]` windows, so it can
//! neither fire (5 min) nor clear (up to 15 min after the last ambiguous delivery) within
//! a test. The copy is derived from the rules file text, with `[15m]` -> `[15s]` and
//! `for: 5m` -> `for: 5s` (the same expression, threshold and traffic guard); the
//! derivation fails if the rule's windows change, so the copy cannot drift silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::NewCommand;

use crate::harness::{
    free_port, http_client, repo_root, server_everything_stdio_argv, which, ChildGuard, Rig, RigOptions,
};

/// The scrape job name the rules (`TunnelgateDown`) and the dashboard expect.
const JOB: &str = "tunnelgate";
const RULES: &str = "deploy/prometheus/tunnelgate-rules.yml";
const DASHBOARD: &str = "dashboards/tunnelgate.json";
/// Grafana's `$__rate_interval` for a 1 s scrape interval: max($__interval + scrape
/// interval, 4 x scrape interval) = 4 s.
const RATE_INTERVAL: &str = "4s";
/// `$__interval` at 1 s resolution, `$__range` a one-hour dashboard.
const INTERVAL: &str = "1s";
const RANGE: &str = "1h";
/// The only dashboard panel that is empty on a healthy gateway: `tunnelgate_fatal_info`
/// has a series only while latched (it carries the category). Checked after the latch.
const LATCH_ONLY_PANEL: &str = "Fatal latch and category";
/// The reconciliation tables, whose rows are checked against gateway A's outcomes.
const NON_ACKED_PANEL: &str = "Non-acked deliveries in range, by kind and outcome";
const ABANDONED_PANEL: &str = "Abandoned legs in range, by transport";
const AMBIGUITY: &str = "TunnelgateDeliveryAmbiguity";
const AMBIGUITY_SCALED: &str = "TunnelgateDeliveryAmbiguityTimescaled";
const FATAL: &str = "TunnelgateFatalLatch";

const STARTUP: Duration = Duration::from_secs(30);
const EXIT: Duration = Duration::from_secs(20);
/// Between two rounds of traffic (and two looks at Prometheus).
const TICK: Duration = Duration::from_millis(300);

/// Terminal-POST faults by tool name: each tool ends in one delivery outcome.
const FAULTS: &str = r#"
[[rule]]
match = { tool = "nf", resp_type = "terminal" }
status = 404

[[rule]]
match = { tool = "rej", resp_type = "terminal" }
status = 400

[[rule]]
match = { tool = "amb", resp_type = "terminal" }
action = "close"

[[rule]]
match = { tool = "held", resp_type = "terminal" }
action = "hold"
"#;

#[tokio::test]
async fn dashboard_and_alert_rules_hold_against_a_real_prometheus_and_alertmanager() {
    let started = Instant::now();
    let tools = Tools::find();

    // --- the gateways' surroundings ---------------------------------------------------
    let rig_a = Rig::start(FAULTS).await;
    let rig_b = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let instance_a = format!("127.0.0.1:{}", rig_a.ops_port);
    let instance_b = format!("127.0.0.1:{}", rig_b.ops_port);
    let cut_url = cutting_server().await;
    // Bound, never listening: a connect is refused (`not_sent`), and no other process can
    // take the port meanwhile.
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let refused_url = format!("http://{}/mcp", refusing.local_addr().unwrap());

    // --- webhook, Alertmanager, Prometheus --------------------------------------------
    let dir = tempfile::tempdir().unwrap();
    let (hook_url, hook) = Webhook::start().await;
    let alertmanager = tools.alertmanager(dir.path(), &hook_url).await;
    let scaled = timescaled_ambiguity_rule(&std::fs::read_to_string(repo_root().join(RULES)).unwrap());
    let prom = tools
        .prometheus(dir.path(), &alertmanager.addr, &[&instance_a, &instance_b], &scaled)
        .await;
    eprintln!("[{:?}] prometheus and alertmanager ready", started.elapsed());

    // --- gateway A: every outcome ---------------------------------------------------
    let stdio = serde_json::to_string(&server_everything_stdio_argv()).unwrap();
    let extra = format!(
        "[mcp.channels.cut]\nurl = \"{cut_url}\"\n[mcp.channels.refused]\nurl = \"{refused_url}\"\n\
         [mcp.channels.tools]\ncommand = {stdio}\n"
    );
    let mut gw_a = rig_a
        .spawn_gateway(&rig_a.config(&RigOptions {
            strict: false,
            extra: &extra,
            ..Default::default()
        }))
        .await;
    for tool in ["echo", "nf", "rej", "amb", "held"] {
        rig_a.sim.enqueue(call(tool));
    }
    rig_a.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc": "2.0", "id": "p", "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 300}, "_meta": {"progressToken": "t"}}}),
    ));
    rig_a.sim.enqueue(call("echo").channel("cut"));
    rig_a.sim.enqueue(call("echo").channel("refused"));
    rig_a
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list"})).channel("tools"));

    // Ambiguous traffic runs from here until the time-scaled alert fires.
    let sel_a = format!("job=\"{JOB}\", instance=\"{instance_a}\"");
    let outcomes = |by: &str, metric: &str| {
        let q = format!("sum by ({by}) ({metric}{{{sel_a}}}) > 0");
        let prom = &prom;
        let by = by.to_owned();
        async move { labels_of(&prom.query(&q).await.unwrap_or_else(|e| panic!("{q}: {e}")), &by) }
    };
    let want_delivered = [
        "terminal acked",
        "terminal not_found",
        "terminal rejected",
        "terminal ambiguous",
        "notify acked",
    ];
    // The ambiguous ones both ways: connection closed after the write, and no answer.
    let want_attempts = [
        "terminal ok",
        "terminal not_found",
        "terminal rejected_status",
        "terminal transport_after_write",
        "terminal timeout",
    ];
    let want_legs = ["http answered", "stdio answered", "http not_sent", "http abandoned"];
    let mut feed = Feeder::new(&rig_a, STARTUP);
    loop {
        let delivered = outcomes("kind, outcome", "tunnelgate_deliveries_total").await;
        let attempts = outcomes("kind, result", "tunnelgate_delivery_attempts_total").await;
        let legs = outcomes("transport, outcome", "tunnelgate_downstream_requests_total").await;
        let all = |want: &[&str], have: &BTreeSet<String>| want.iter().all(|w| have.contains(*w));
        if all(&want_delivered, &delivered) && all(&want_attempts, &attempts) && all(&want_legs, &legs) {
            break;
        }
        let what =
            format!("every outcome scraped; so far deliveries {delivered:?}, attempts {attempts:?}, legs {legs:?}");
        feed.round(true, &what).await;
    }
    eprintln!("[{:?}] every delivery and leg outcome scraped", started.elapsed());

    // (a) the dashboard's expressions, on gateway A's live series. Polled: a series that
    // exists only once traffic ran (the latency histogram) may lag a scrape behind.
    let targets = dashboard_targets();
    assert!(!targets.is_empty(), "{DASHBOARD} has no targets");
    let exported = crate::series::exported_names(&rig_a.metrics().await);
    crate::series::report_awaited(&exported, "the dashboard's live check");
    let (awaited, present): (Vec<&Target>, Vec<&Target>) = targets.iter().partition(|t| !t.awaited().is_empty());
    for t in &awaited {
        let expr = t.substituted(&instance_a);
        if let Err(e) = prom.query(&expr).await {
            panic!("Prometheus refused the dashboard expression of {t}: {e}\n{expr}");
        }
        eprintln!(
            "accepted by Prometheus, NOT checked for series (queries {:?}, not exported by this gateway): {t}",
            t.awaited()
        );
    }
    // The reconciliation tables show increases within the range, and Prometheus sees an
    // increase only between two of its samples: one more cut leg and one more rejected
    // delivery, now that it has scraped the earlier ones (the feeder repeats the others).
    rig_a.sim.enqueue(call("echo").channel("cut"));
    rig_a.sim.enqueue(call("rej"));
    let (mut waiting, latch_only): (Vec<&Target>, Vec<&Target>) =
        present.into_iter().partition(|t| t.panel != LATCH_ONLY_PANEL);
    assert_eq!(latch_only.len(), 1, "exactly one latch-only target: {latch_only:?}");
    let mut feed = Feeder::new(&rig_a, Duration::from_secs(15));
    loop {
        let mut empty = Vec::new();
        for t in waiting {
            let expr = t.substituted(&instance_a);
            match prom.query(&expr).await {
                Ok(series) if !series.is_empty() => {}
                Ok(_) => empty.push(t),
                Err(e) => panic!("Prometheus refused the dashboard expression of {t}: {e}\n{expr}"),
            }
        }
        waiting = empty;
        if waiting.is_empty() {
            break;
        }
        let names: Vec<String> = waiting.iter().map(|t| t.to_string()).collect();
        let what = format!("dashboard expressions returning no series:\n{}", names.join("\n"));
        feed.round(true, &what).await;
    }
    eprintln!(
        "[{:?}] {} dashboard expressions return series ({} awaited, 1 latch-only)",
        started.elapsed(),
        targets.len() - awaited.len() - 1,
        awaited.len()
    );

    // (a) the reconciliation tables list what gateway A did, and only that.
    let rows = |title: &str, by: &'static str| {
        let t = targets
            .iter()
            .find(|t| t.panel == title)
            .unwrap_or_else(|| panic!("{DASHBOARD} has no panel {title:?}"));
        let expr = t.substituted(&instance_a);
        let prom = &prom;
        async move { labels_of(&prom.query(&expr).await.unwrap(), by) }
    };
    let non_acked = rows(NON_ACKED_PANEL, "kind, outcome").await;
    for want in ["terminal not_found", "terminal rejected", "terminal ambiguous"] {
        assert!(
            non_acked.contains(want),
            "{NON_ACKED_PANEL} lacks {want}: {non_acked:?}"
        );
    }
    assert!(
        !non_acked.iter().any(|r| r.ends_with(" acked")),
        "{NON_ACKED_PANEL} lists acked: {non_acked:?}"
    );
    let abandoned = rows(ABANDONED_PANEL, "transport").await;
    assert!(abandoned.contains("http"), "{ABANDONED_PANEL}: {abandoned:?}");

    // (a) the template variables: `label_values(SELECTOR, LABEL)` is Grafana's call of
    // Prometheus's label-values API; `$job` must offer `tunnelgate`, `$instance` gateway A.
    for (name, (selector, label)) in dashboard_label_values_variables() {
        let selector = selector.replace("$job", JOB);
        let offered = prom.label_values(&label, &selector).await;
        let want = if name == "job" { JOB } else { instance_a.as_str() };
        assert!(
            offered.iter().any(|v| v == want),
            "template variable ${name} = label_values({selector}, {label}) offers {offered:?}, not {want}"
        );
    }

    // (a) every rule of the repository's file loaded, evaluates healthy, its query runs.
    let rules = prom.rules().await;
    let file_rules: Vec<&Value> = rules.iter().filter(|r| r["group"] == "tunnelgate").collect();
    let loaded: BTreeSet<String> = file_rules
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(loaded, alert_names_in_rules_file(), "every alert of {RULES} is loaded");
    for r in &file_rules {
        assert_eq!(r["health"], "ok", "rule {} evaluates: {r}", r["name"]);
        let expr = r["query"].as_str().unwrap();
        if let Err(e) = prom.query(expr).await {
            panic!("Prometheus refused the expression of {}: {e}\n{expr}", r["name"]);
        }
    }

    // (b) the ambiguity alert: the real rule goes pending on the live data; the scaled
    // copy fires while ambiguous deliveries continue...
    let mut feed = Feeder::new(&rig_a, STARTUP);
    let scaled_firing = loop {
        let alerts = prom.alerts().await;
        let find = |name: &str| {
            alerts
                .iter()
                .find(|a| a["labels"]["alertname"] == name && a["labels"]["instance"] == instance_a.as_str())
        };
        match (find(AMBIGUITY), find(AMBIGUITY_SCALED)) {
            (Some(real), Some(scaled)) if real["state"] == "pending" && scaled["state"] == "firing" => {
                break scaled.clone()
            }
            (real, scaled) => {
                let what = format!("{AMBIGUITY} pending and {AMBIGUITY_SCALED} firing; now {real:?}, {scaled:?}");
                feed.round(true, &what).await;
            }
        }
    };
    assert_eq!(
        scaled_firing["labels"],
        json!({"alertname": AMBIGUITY_SCALED, "job": JOB, "instance": instance_a, "severity": "ticket"}),
        "{scaled_firing}"
    );
    eprintln!(
        "[{:?}] ambiguity alert firing (scaled copy), pending (real rule)",
        started.elapsed()
    );

    // ... and clears once they stop while acknowledged traffic goes on (the ratio, not
    // the traffic guard, clears it). The real rule stays pending: its window is 15 min.
    let mut feed = Feeder::new(&rig_a, Duration::from_secs(45));
    let real_state = loop {
        let rules = prom.rules().await;
        let state = |name: &str| {
            rules
                .iter()
                .find(|r| r["name"] == name)
                .and_then(|r| r["state"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        if state(AMBIGUITY_SCALED) == "inactive" {
            break state(AMBIGUITY);
        }
        feed.round(false, &format!("{AMBIGUITY_SCALED} to clear")).await;
    };
    assert_eq!(
        real_state, "pending",
        "the real rule's 15 min window still holds the ambiguity"
    );
    let guard = format!("sum(increase(tunnelgate_deliveries_total{{{sel_a}, kind=\"terminal\"}}[15s]))");
    let in_window = prom.query(&guard).await.unwrap();
    assert!(
        value_of(&in_window[0]) >= 20.0,
        "cleared by the ratio, with the traffic guard still met: {in_window:?}"
    );
    eprintln!("[{:?}] scaled ambiguity alert cleared", started.elapsed());

    // --- (c) gateway B: a strict latch, then a held restart ----------------------------
    let mut first = rig_b.spawn_gateway(&rig_b.config(&RigOptions::default())).await;
    rig_b.enqueue_call("echo", json!({"message": "latch"}));
    assert_eq!(first.wait_exit(EXIT).await, Some(82), "{}", first.stderr());
    let hold = rig_b
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut held = rig_b.spawn_gateway(&hold).await;

    let fired = wait_for(STARTUP, "TunnelgateFatalLatch firing for the held gateway", || async {
        let alerts = prom.alerts().await;
        let mine: Vec<&Value> = alerts
            .iter()
            .filter(|a| a["labels"]["alertname"] == FATAL && a["labels"]["instance"] == instance_b.as_str())
            .collect();
        let firing = mine
            .iter()
            .find(|a| a["state"] == "firing" && a["labels"]["category"] == "ack_not_found")?;
        assert!(
            !mine.iter().any(|a| a["labels"]["category"] == "unknown"),
            "the category=\"unknown\" fallback stays silent while tunnelgate_fatal_info exists: {mine:?}"
        );
        Some((*firing).clone())
    })
    .await;
    let labels = json!({"alertname": FATAL, "category": "ack_not_found", "job": JOB,
        "instance": instance_b, "severity": "page"});
    assert_eq!(fired["labels"], labels, "{fired}");
    let latch_panel = latch_only[0].substituted(&instance_b);
    let info = prom.query(&latch_panel).await.unwrap();
    assert_eq!(info.len(), 1, "{latch_panel}: {info:?}");
    assert_eq!(info[0]["metric"]["category"], "ack_not_found", "{info:?}");
    assert_eq!(value_of(&info[0]), 1.0, "{info:?}");
    eprintln!("[{:?}] fatal latch alert firing in Prometheus", started.elapsed());

    let notified = wait_for(
        STARTUP,
        "Alertmanager to post TunnelgateFatalLatch to the webhook",
        || async {
            hook.received().into_iter().find_map(|body| {
                let alert = body["alerts"]
                    .as_array()?
                    .iter()
                    .find(|a| a["labels"]["alertname"] == FATAL && a["labels"]["category"] == "ack_not_found")?
                    .clone();
                Some((body, alert))
            })
        },
    )
    .await;
    let (body, alert) = notified;
    assert_eq!(body["version"], "4", "{body}");
    assert_eq!(body["receiver"], "test-webhook", "{body}");
    assert_eq!(alert["status"], "firing", "{alert}");
    assert_eq!(alert["labels"], labels, "{alert}");
    assert_eq!(
        alert["annotations"]["runbook_url"],
        "https://github.com/tunnelgate/tunnelgate/blob/main/docs/runbook.md#alert-tunnelgatefatallatch",
        "{alert}"
    );
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{instance_b} latched fatal: ack_not_found")),
        "{alert}"
    );
    eprintln!("[{:?}] webhook received the fatal latch alert", started.elapsed());

    held.sigterm();
    assert_eq!(held.wait_exit(EXIT).await, Some(89), "{}", held.stderr());
    gw_a.sigterm();
    assert_eq!(gw_a.wait_exit(EXIT).await, Some(0), "{}", gw_a.stderr());
    drop((prom, alertmanager));
    eprintln!("[{:?}] done", started.elapsed());
}

// ---------------------------------------------------------------------------------------
// Traffic
// ---------------------------------------------------------------------------------------

fn call(tool: &str) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": tool, "method": "tools/call",
        "params": {"name": tool, "arguments": {"message": tool}}}))
}

/// Traffic for gateway A in rounds, one every [`TICK`], for at most `within`.
struct Feeder<'a> {
    rig: &'a Rig,
    within: Duration,
    deadline: Instant,
}

impl<'a> Feeder<'a> {
    fn new(rig: &'a Rig, within: Duration) -> Self {
        Self {
            rig,
            within,
            deadline: Instant::now() + within,
        }
    }

    /// Queues an acknowledged `echo`; with `ambiguous`, also one `amb` (connection closed
    /// after the write: ambiguous) and one `nf` (404: not_found). Then pauses a tick;
    /// panics naming `waiting_for` once the deadline has passed.
    async fn round(&mut self, ambiguous: bool, waiting_for: &str) {
        assert!(
            Instant::now() < self.deadline,
            "timed out after {:?} waiting for {waiting_for}",
            self.within
        );
        self.rig.sim.enqueue(call("echo"));
        if ambiguous {
            self.rig.sim.enqueue(call("amb"));
            self.rig.sim.enqueue(call("nf"));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Polls `probe` every [`TICK`] until it yields, at most `timeout`.
async fn wait_for<T, Fut>(timeout: Duration, what: &str, probe: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    crate::harness::wait_for_every(what, timeout, TICK, probe).await
}

/// An MCP server that reads a request, then closes the connection without answering:
/// the leg ends `abandoned`.
async fn cutting_server() -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = vec![0u8; 65536];
            let _ = tokio::time::timeout(Duration::from_millis(200), sock.read(&mut buf)).await;
            drop(sock);
        }
    });
    url
}

// ---------------------------------------------------------------------------------------
// The dashboard and the rules file
// ---------------------------------------------------------------------------------------

/// One query of a dashboard panel.
#[derive(Debug)]
struct Target {
    panel: String,
    ref_id: String,
    expr: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "panel {:?} target {}: {}", self.panel, self.ref_id, self.expr)
    }
}

impl Target {
    /// The metrics this expression queries that gateway A cannot export: those of
    /// [`crate::series::AWAITED`], and the [`crate::series::COORDINATED`] ones (it runs
    /// without coordination).
    fn awaited(&self) -> Vec<String> {
        crate::series::metric_names_in(&self.expr)
            .into_iter()
            .filter(|n| crate::series::AWAITED.contains(&n.as_str()) || crate::series::coordinated(n))
            .collect()
    }

    /// The expression as Grafana would send it with `$job` = `tunnelgate` and
    /// `$instance` = `instance` (single values; the matchers are `=~`).
    fn substituted(&self, instance: &str) -> String {
        let vars = [
            ("${__rate_interval}", RATE_INTERVAL),
            ("$__rate_interval", RATE_INTERVAL),
            ("${__interval}", INTERVAL),
            ("$__interval", INTERVAL),
            ("${__range}", RANGE),
            ("$__range", RANGE),
            ("${job}", JOB),
            ("$job", JOB),
            ("${instance}", instance),
            ("$instance", instance),
        ];
        let expr = vars
            .iter()
            .fold(self.expr.clone(), |e, (var, value)| e.replace(var, value));
        assert!(!expr.contains('$'), "{self}: a template variable is left: {expr}");
        expr
    }
}

/// Every target of every panel (rows' nested panels included).
fn dashboard_targets() -> Vec<Target> {
    fn walk(panels: &Value, out: &mut Vec<Target>) {
        for panel in panels.as_array().into_iter().flatten() {
            for t in panel["targets"].as_array().into_iter().flatten() {
                out.push(Target {
                    panel: panel["title"].as_str().unwrap_or_default().to_owned(),
                    ref_id: t["refId"].as_str().unwrap_or_default().to_owned(),
                    expr: t["expr"].as_str().expect("every target has an expr").to_owned(),
                });
            }
            walk(&panel["panels"], out);
        }
    }
    let dashboard: Value = serde_json::from_slice(&std::fs::read(repo_root().join(DASHBOARD)).unwrap()).unwrap();
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The dashboard's `label_values(SELECTOR, LABEL)` template variables, by name.
fn dashboard_label_values_variables() -> Vec<(String, (String, String))> {
    let dashboard: Value = serde_json::from_slice(&std::fs::read(repo_root().join(DASHBOARD)).unwrap()).unwrap();
    let vars: Vec<_> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().unwrap().to_owned();
            let query = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap_or_default();
            let args = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .and_then(|q| q.rsplit_once(','))
                .unwrap_or_else(|| panic!("template variable ${name} is not label_values(SELECTOR, LABEL): {query}"));
            (name, (args.0.trim().to_owned(), args.1.trim().to_owned()))
        })
        .collect();
    let names: Vec<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["job", "instance"], "the dashboard's query variables");
    vars
}

/// The `- alert: NAME` entries of the rules file.
fn alert_names_in_rules_file() -> BTreeSet<String> {
    std::fs::read_to_string(repo_root().join(RULES))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().to_owned())
        .collect()
}

/// A rules file holding only `TunnelgateDeliveryAmbiguity`, renamed, with its windows
/// divided by 60 (`[15m]` -> `[15s]`, `for: 5m` -> `for: 5s`). Panics if the rule's text
/// no longer has exactly those windows: then this copy must be revisited.
fn timescaled_ambiguity_rule(rules: &str) -> String {
    let head = format!("      - alert: {AMBIGUITY}\n");
    let start = rules
        .find(&head)
        .unwrap_or_else(|| panic!("{RULES} has no `{}`", head.trim()));
    let rest = &rules[start + head.len()..];
    let end = rest.find("\n      - alert: ").map_or(rest.len(), |i| i + 1);
    let block = format!("      - alert: {AMBIGUITY_SCALED}\n{}", &rest[..end]);
    let scale = |text: String, from: &str, to: &str, n: usize| {
        assert_eq!(
            text.matches(from).count(),
            n,
            "{AMBIGUITY} in {RULES} changed: expected {n} x `{from}`; revisit the time-scaled copy:\n{text}"
        );
        text.replace(from, to)
    };
    let block = scale(block, "[15m]", "[15s]", 3);
    let block = scale(block, "for: 5m", "for: 5s", 1);
    format!("groups:\n  - name: tunnelgate-timescaled\n    rules:\n{block}")
}

// ---------------------------------------------------------------------------------------
// Prometheus, Alertmanager, the webhook
// ---------------------------------------------------------------------------------------

/// The Debian binaries.
struct Tools {
    prometheus: PathBuf,
    alertmanager: PathBuf,
}

impl Tools {
    fn find() -> Tools {
        let find = |name: &str| {
            which(name).unwrap_or_else(|| {
                panic!(
                    "`{name}` is not on PATH: run scripts/install-peers (it installs Debian's \
                     prometheus and prometheus-alertmanager)"
                )
            })
        };
        Tools {
            prometheus: find("prometheus"),
            alertmanager: find("prometheus-alertmanager"),
        }
    }

    /// Alertmanager routing everything to `hook_url` (1 s group wait and interval).
    async fn alertmanager(&self, dir: &Path, hook_url: &str) -> Server {
        let config = dir.join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: test-webhook\n  group_by: [alertname, instance]\n  group_wait: 1s\n  \
                 group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: test-webhook\n    \
                 webhook_configs:\n      - url: {hook_url}\n        send_resolved: true\n"
            ),
        )
        .unwrap();
        let storage = dir.join("alertmanager-data");
        Server::spawn("prometheus-alertmanager", |port| {
            let mut cmd = Command::new(&self.alertmanager);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.path={}", storage.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                // Empty: no cluster gossip (no extra listener).
                .arg("--cluster.listen-address=")
                .arg("--log.level=warn");
            cmd
        })
        .await
    }

    /// Prometheus scraping `targets` as job `tunnelgate` every second, evaluating the
    /// repository's rules file and `extra_rules` every second, alerting `alertmanager`.
    async fn prometheus(&self, dir: &Path, alertmanager: &str, targets: &[&str], extra_rules: &str) -> Server {
        let scaled = dir.join("timescaled-rules.yml");
        std::fs::write(&scaled, extra_rules).unwrap();
        let config = dir.join("prometheus.yml");
        let targets = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n  - {scaled}\n\
                 alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\n\
                 scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{targets}]\n",
                rules = repo_root().join(RULES).display(),
                scaled = scaled.display(),
            ),
        )
        .unwrap();
        let storage = dir.join("prometheus-data");
        Server::spawn("prometheus", |port| {
            let mut cmd = Command::new(&self.prometheus);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", storage.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                // Without it the first notification goes out before Alertmanager is
                // discovered and is dropped; the next comes a minute later.
                .arg("--rules.alert.resend-delay=1s")
                .arg("--log.level=warn");
            cmd
        })
        .await
    }
}

/// A server process on a loopback port, ready (`/-/ready` answers 200).
struct Server {
    _process: ChildGuard,
    /// `127.0.0.1:PORT`.
    addr: String,
    client: reqwest::Client,
}

impl Server {
    /// Spawns `make(port)` on a free port; retries on another port if it exits first
    /// (it lost the race for the port).
    async fn spawn(name: &str, make: impl Fn(u16) -> Command) -> Server {
        let client = http_client();
        for _ in 0..3 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let mut process = ChildGuard::spawn(name, make(port));
            let deadline = Instant::now() + STARTUP;
            while process.try_wait().is_none() {
                let ready = client.get(format!("http://{addr}/-/ready")).send().await;
                if ready.is_ok_and(|r| r.status().is_success()) {
                    return Server {
                        _process: process,
                        addr,
                        client,
                    };
                }
                assert!(
                    Instant::now() < deadline,
                    "{name} not ready on {addr} within {STARTUP:?}; stderr:\n{}",
                    process.stderr()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            eprintln!("{name} exited before serving on {addr}:\n{}", process.stderr());
        }
        panic!("{name} did not start on any of 3 ports");
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let url = reqwest::Url::parse_with_params(&format!("http://{}{path}", self.addr), query)
            .map_err(|e| format!("{path}: {e}"))?;
        let resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        let body: Value = resp.json().await.map_err(|e| format!("GET {path}: not JSON: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"].clone())
    }

    /// `/api/v1/query`: the instant vector, or Prometheus's error.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await?;
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            other => Err(format!("result type {other:?}, not a vector")),
        }
    }

    /// `/api/v1/label/LABEL/values` of the series `selector` matches.
    async fn label_values(&self, label: &str, selector: &str) -> Vec<String> {
        let data = self
            .api(&format!("/api/v1/label/{label}/values"), &[("match[]", selector)])
            .await
            .unwrap_or_else(|e| panic!("label values of {label} for {selector}: {e}"));
        data.as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// `/api/v1/alerts`: pending and firing alerts.
    async fn alerts(&self) -> Vec<Value> {
        let data = self.api("/api/v1/alerts", &[]).await.unwrap();
        data["alerts"].as_array().cloned().unwrap_or_default()
    }

    /// `/api/v1/rules`: every rule, with its group's name under `group`.
    async fn rules(&self) -> Vec<Value> {
        let data = self.api("/api/v1/rules", &[]).await.unwrap();
        let mut out = Vec::new();
        for group in data["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let mut rule = rule.clone();
                rule["group"] = group["name"].clone();
                out.push(rule);
            }
        }
        out
    }
}

/// `label1 label2` of each series in `result` (`by` lists the labels, comma-separated).
fn labels_of(result: &[Value], by: &str) -> BTreeSet<String> {
    result
        .iter()
        .map(|s| {
            by.split(',')
                .map(|l| s["metric"][l.trim()].as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The sample value of one series of an instant vector.
fn value_of(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Records every JSON body Alertmanager posts.
#[derive(Clone, Default)]
struct Webhook(Arc<Mutex<Vec<Value>>>);

impl Webhook {
    async fn start() -> (String, Webhook) {
        use axum::extract::State;
        let hook = Webhook::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/alerts", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route(
                "/alerts",
                axum::routing::post(
                    |State(hook): State<Webhook>, axum::Json(body): axum::Json<Value>| async move {
                        hook.0.lock().unwrap().push(body);
                        axum::http::StatusCode::OK
                    },
                ),
            )
            .with_state(hook.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, hook)
    }

    fn received(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}
