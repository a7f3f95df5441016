//! Every series the operator artefacts query exists from the first scrape.
//!
//! The metric names are read from the files themselves, never listed here: every
//! `tunnelgate_*` name in `dashboards/` (the Grafana dashboard and `metrics.txt`) and in
//! `deploy/prometheus/` (the alert rules and their tests), found as `scripts/check-ops.py`
//! finds the rules' names. A fresh gateway, with an HTTP and a stdio channel configured,
//! is scraped once, before it has carried any command: each name must be in that scrape,
//! the latency histogram with the buckets of every `leg` docs/observability.md documents
//! (and no other) at zero. Three kinds of name are exceptions, each said here and checked
//! to still be one: [`STATEFUL`] (info metrics that exist only while their state holds),
//! [`COORDINATED`] (registered only with the etcd coordination backend) and [`AWAITED`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::harness::{repo_root, server_everything_stdio_argv, Rig, RigOptions};

/// Info metrics with a series only while their state holds, so absent from a fresh
/// gateway: `tunnelgate_fatal_info` carries the latch's category and exists only once
/// latched (the dashboard's "Fatal latch and category" panel and `TunnelgateFatalLatch`
/// read it; `tests/it/prometheus.rs` checks it on a latched gateway).
pub(crate) const STATEFUL: &[&str] = &["tunnelgate_fatal_info"];

/// The prefix of the metrics registered only with `coordination.backend = "etcd"` (strict
/// mode across replicas), so absent from the default-mode gateway scraped here: the
/// dashboard's "Coordination" row and the coordination alerts read them. Checked here to
/// be named by the artefacts and absent without coordination.
pub(crate) const COORDINATED: &str = "tunnelgate_coordination_";

/// Whether a metric name is one of [`COORDINATED`].
pub(crate) fn coordinated(name: &str) -> bool {
    name.starts_with(COORDINATED)
}

/// Names the dashboard and `metrics.txt` already carry whose metrics this build does not
/// export yet: the receipts journal's counters and the per-channel last-success gauge
/// arrive with their own changes. Every test that meets one says so by name, and fails
/// once it is exported: then delete it here.
pub(crate) const AWAITED: &[&str] = &[];

/// Where the operator artefacts that name metrics live.
const ARTEFACT_DIRS: [&str; 2] = ["dashboards", "deploy/prometheus"];

/// The metric names of a Prometheus text exposition: every sample's name, and every
/// family named by a `# TYPE` line (so a histogram counts under its own name too).
pub(crate) fn exported_names(exposition: &str) -> BTreeSet<String> {
    let families = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    sample_names(exposition).into_iter().chain(families).collect()
}

/// The name of every sample of a Prometheus text exposition (a histogram's `_bucket`,
/// `_sum` and `_count`, not its family name).
fn sample_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l[..l.find(['{', ' ']).unwrap_or(l.len())].to_owned())
        .collect()
}

/// Every `tunnelgate_*` metric name in `text`: an identifier that starts with the prefix
/// and has more after it (the rules' regular expression `\btunnelgate_[a-z0-9_]+`).
pub(crate) fn metric_names_in(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "tunnelgate_";
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(PREFIX) {
        if text[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &text[at + PREFIX.len()..];
        let len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 {
            names.insert(format!("{PREFIX}{}", &rest[..len]));
        }
    }
    names
}

/// Every metric name the files of [`ARTEFACT_DIRS`] name, with the files naming it
/// (relative to the repository). Comment lines of `metrics.txt` are prose, not names.
fn names_in_artefacts() -> BTreeMap<String, BTreeSet<String>> {
    let root = repo_root();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for dir in ARTEFACT_DIRS {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let text = if path.file_name().is_some_and(|n| n == "metrics.txt") {
                listed(&text).into_iter().collect::<Vec<_>>().join("\n")
            } else {
                text
            };
            let shown = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
            for name in metric_names_in(&text) {
                out.entry(name).or_default().insert(shown.clone());
            }
        }
    }
    out
}

/// The reference whose metrics table gives each metric's label values.
const OBSERVABILITY: &str = "docs/observability.md";

/// The `leg` values [`OBSERVABILITY`] gives `tunnelgate_command_duration_seconds`, in its
/// order: its row of the metrics table says "`leg` = queue, fence_wait, ...".
fn documented_legs() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join(OBSERVABILITY)).unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `tunnelgate_command_duration_seconds` |"))
        .unwrap_or_else(|| panic!("{OBSERVABILITY} has a row for tunnelgate_command_duration_seconds"));
    let labels = row.split('|').nth(3).unwrap_or_default().trim();
    let values = labels
        .strip_prefix("`leg` = ")
        .unwrap_or_else(|| panic!("the row gives the leg values as `leg` = ...: {row}"));
    let legs: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
    assert!(
        legs.len() >= 2
            && legs
                .iter()
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')),
        "leg values read from {OBSERVABILITY}: {legs:?}"
    );
    legs
}

/// The `leg` values of `tunnelgate_command_duration_seconds` in a scrape.
fn exported_legs(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("tunnelgate_command_duration_seconds_count{leg=\""))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The names `dashboards/metrics.txt` lists (one a line, `#` comments skipped).
pub(crate) fn listed(metrics_txt: &str) -> BTreeSet<String> {
    metrics_txt
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// `dashboards/metrics.txt`, read.
pub(crate) fn metrics_txt() -> BTreeSet<String> {
    listed(&std::fs::read_to_string(repo_root().join("dashboards/metrics.txt")).unwrap())
}

/// Panics naming each [`AWAITED`] name that `exported` holds (the list is stale), and
/// says on stderr which ones this build does not export.
pub(crate) fn report_awaited(exported: &BTreeSet<String>, what: &str) {
    let arrived: Vec<&&str> = AWAITED.iter().filter(|n| exported.contains(**n)).collect();
    assert!(
        arrived.is_empty(),
        "{arrived:?} are exported now: delete them from AWAITED in {}",
        Path::new(file!()).display()
    );
    eprintln!("{what}: not exported by this build, awaited from other changes: {AWAITED:?}");
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alert_rules_name_is_exported_from_the_first_scrape() {
    let rig = Rig::start("").await;
    let stdio = serde_json::to_string(&server_everything_stdio_argv()).unwrap();
    let extra = format!("[mcp.channels.tools]\ncommand = {stdio}\n");
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            strict: false,
            extra: &extra,
            ..Default::default()
        }))
        .await;
    // The first scrape, before any command: nothing has been enqueued.
    let text = rig.metrics().await;
    let exported = exported_names(&text);

    let named = names_in_artefacts();
    let files_of = |name: &str| named[name].iter().cloned().collect::<Vec<_>>().join(", ");
    assert!(
        named.contains_key("tunnelgate_deliveries_total")
            && named.contains_key("tunnelgate_command_duration_seconds_bucket"),
        "the scan of {ARTEFACT_DIRS:?} found too little: {named:?}"
    );
    let missing: Vec<String> = named
        .keys()
        .filter(|n| {
            !exported.contains(*n)
                && !STATEFUL.contains(&n.as_str())
                && !AWAITED.contains(&n.as_str())
                && !coordinated(n)
        })
        .map(|n| format!("{n} (named by {})", files_of(n)))
        .collect();
    assert!(
        missing.is_empty(),
        "named by the operator artefacts, missing from a fresh gateway's first scrape:\n{}\n\nscrape:\n{text}",
        missing.join("\n")
    );

    // The exceptions are still exceptions, and still named (else delete them).
    for name in STATEFUL {
        assert!(
            named.contains_key(*name),
            "{name} is named by no artefact: delete it from STATEFUL"
        );
        assert!(
            !exported.contains(*name),
            "{name} exists on a fresh gateway: it is no exception\n{text}"
        );
    }
    for name in AWAITED {
        assert!(
            named.contains_key(*name),
            "{name} is named by no artefact: delete it from AWAITED"
        );
    }
    assert!(
        named.keys().any(|n| coordinated(n)),
        "no artefact names a {COORDINATED}* metric: delete COORDINATED"
    );
    let uncoordinated: Vec<&String> = exported.iter().filter(|n| coordinated(n)).collect();
    assert!(
        uncoordinated.is_empty(),
        "{uncoordinated:?} exported without coordination: they are registered only with coordination.backend = \"etcd\"\n{text}"
    );
    report_awaited(&exported, "the first scrape");

    // Histograms without observations export every bucket at zero, for every leg the
    // reference documents; and the scrape has no leg it does not.
    let legs = documented_legs();
    assert_eq!(
        exported_legs(&text),
        legs.iter().cloned().collect::<BTreeSet<_>>(),
        "the legs of the first scrape are the documented ones ({OBSERVABILITY})"
    );
    for leg in &legs {
        for series in [
            format!("tunnelgate_command_duration_seconds_bucket{{leg=\"{leg}\",le=\"+Inf\"}} 0"),
            format!("tunnelgate_command_duration_seconds_count{{leg=\"{leg}\"}} 0"),
        ] {
            assert!(text.lines().any(|l| l == series), "{series} missing:\n{text}");
        }
    }

    // And `metrics.txt` lists everything exported (its header says so; the checks of the
    // dashboard and the rules trust it).
    let listed = metrics_txt();
    let unlisted: Vec<String> = sample_names(&text)
        .into_iter()
        .filter(|n| !listed.contains(n))
        .collect();
    assert!(
        unlisted.is_empty(),
        "exported but not in dashboards/metrics.txt: {unlisted:?}"
    );

    gw.sigterm();
    assert_eq!(
        gw.wait_exit(std::time::Duration::from_secs(20)).await,
        Some(0),
        "{}",
        gw.stderr()
    );
}

#[test]
fn metric_names_are_found_as_the_rules_check_finds_them() {
    let expr = "sum(rate(tunnelgate_deliveries_total{job=~\"$job\", kind=\"terminal\"}[5m])) / \
                x_tunnelgate_other + tunnelgate_ alone, tunnelgate_fatal_info==1";
    assert_eq!(
        metric_names_in(expr).into_iter().collect::<Vec<_>>(),
        ["tunnelgate_deliveries_total", "tunnelgate_fatal_info"]
    );
    let exposition = "# HELP tunnelgate_a_seconds A.\n# TYPE tunnelgate_a_seconds histogram\n\
                      tunnelgate_a_seconds_bucket{le=\"+Inf\"} 0\ntunnelgate_b 1\n";
    assert_eq!(
        exported_names(exposition).into_iter().collect::<Vec<_>>(),
        ["tunnelgate_a_seconds", "tunnelgate_a_seconds_bucket", "tunnelgate_b"]
    );
}

/// With `coordination.backend = "etcd"`, every [`COORDINATED`] name the artefacts use is
/// exported from the first scrape too, before etcd has answered at all (here it never
/// does: the endpoint is a port that refuses every connect), the role as `unavailable`.
#[tokio::test]
async fn a_coordinated_gateway_exports_every_coordination_metric_the_artefacts_name_from_the_first_scrape() {
    let rig = Rig::start("").await;
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let etcd = format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port());
    let extra = format!("\n[coordination]\nbackend = \"etcd\"\n[coordination.etcd]\nendpoints = [\"{etcd}\"]\n");
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            extra: &extra,
            ..Default::default()
        }))
        .await;
    let text = rig.metrics().await;
    let exported = exported_names(&text);
    // `holder_info` is an info metric with a series only while a holder is known (as
    // `fatal_info` while latched); a name ending in `_` is the artefacts' prefix match.
    let missing: Vec<String> = names_in_artefacts()
        .into_keys()
        .filter(|n| coordinated(n) && !n.ends_with('_') && n != "tunnelgate_coordination_holder_info")
        .filter(|n| !exported.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "missing from a coordinated gateway's first scrape: {missing:?}\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "tunnelgate_coordination_role{role=\"unavailable\"} 1"),
        "{text}"
    );
    gw.sigterm();
    assert_eq!(
        gw.wait_exit(std::time::Duration::from_secs(20)).await,
        Some(0),
        "{}",
        gw.stderr()
    );
}
