//! Collecting the parts of a bundle: each from the ops listener, the disk or this
//! process, or absent with the reason. Every request and check is bounded by
//! [`Options::timeout`]; nothing is changed anywhere.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::{Collected, Options, Part, Source};
use crate::config::{OfflineConfig, Receipts};
use crate::egress::client::{local_get, Client, LocalGetError};

/// The ops listener's base URL for `listen`: a wildcard address is reached on loopback.
pub(crate) fn ops_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/", SocketAddr::new(ip, listen.port()))
}

/// Every part but the manifest, in the archive's order; `progress` sees each as it is
/// made.
pub(crate) async fn collect(config: &OfflineConfig, options: &Options, progress: &mut dyn FnMut(&Part)) -> Collected {
    let mut parts = Vec::new();
    let mut keep = |part: Part, parts: &mut Vec<Part>| {
        progress(&part);
        parts.push(part);
    };
    keep(configuration(config, options), &mut parts);
    let (served, gateway_down) = from_gateway(options).await;
    for part in served {
        keep(part, &mut parts);
    }
    keep(doctor(config, options).await, &mut parts);
    let latch = &config.strict().latch_file;
    keep(
        from_disk("latch.json", latch, "no latch file (not latched)"),
        &mut parts,
    );
    let intents = crate::strict::FileIntents::beside(latch);
    keep(
        from_disk("intent.json", intents.path(), "no intent record (nothing unsettled)"),
        &mut parts,
    );
    for part in receipts(config.receipts()) {
        keep(part, &mut parts);
    }
    keep(version(), &mut parts);
    Collected { parts, gateway_down }
}

/// Exactly what `tunnelgate check` prints, except that a secret reference that does not
/// resolve here is marked unresolved (and named in the part's source) instead of failing.
fn configuration(config: &OfflineConfig, options: &Options) -> Part {
    let unresolved: Vec<&str> = config.unresolved().iter().map(|e| e.key()).collect();
    let verdict = match unresolved.len() {
        0 => "valid".to_owned(),
        n => format!("valid, but {n} secret reference(s) could not be resolved here (marked unresolved)"),
    };
    let body = format!(
        "# configuration is {verdict}; effective values (secrets masked):\n{}",
        config.masked()
    );
    let mut from = match &options.config_path {
        Some(path) => format!("tunnelgate check --config {}", path.display()),
        None => "tunnelgate check".to_owned(),
    };
    if !unresolved.is_empty() {
        from.push_str(&format!(", secrets unresolved here: {}", unresolved.join(", ")));
    }
    Part {
        name: "config.toml",
        body: body.into_bytes(),
        source: Source::InProcess { from },
    }
}

/// `/status`, `/metrics` and `/events`; when `/status` cannot be reached, all three absent
/// with the reason (also returned).
async fn from_gateway(options: &Options) -> (Vec<Part>, Option<String>) {
    const SERVED: [(&str, &str); 3] = [
        ("status.json", "status"),
        ("metrics.txt", "metrics"),
        ("events.json", "events"),
    ];
    let client = ops_client(&options.ops_url, options.timeout);
    let mut parts = Vec::new();
    let mut down = None;
    for (name, path) in SERVED {
        let url = format!("{}{path}", options.ops_url);
        let source = match (&down, &client) {
            (Some(why), _) => Source::Absent {
                reason: format!("the gateway is not reachable: {why}"),
            },
            (None, Err(e)) => Source::Absent {
                reason: format!("no HTTP client: {e}"),
            },
            (None, Ok(client)) => match fetch(client, &url, options.timeout).await {
                Ok(body) => {
                    parts.push(Part {
                        name,
                        body,
                        source: Source::Ops { url },
                    });
                    continue;
                }
                Err(Fetch::Unreachable(why)) => {
                    let why = format!("nothing answered at {url}: {why}");
                    down = Some(why.clone());
                    Source::Absent {
                        reason: format!("the gateway is not reachable: {why}"),
                    }
                }
                Err(Fetch::Refused(why)) => Source::Absent { reason: why },
            },
        };
        parts.push(Part {
            name,
            body: Vec::new(),
            source,
        });
    }
    (parts, down)
}

/// Why a fetch gave nothing.
enum Fetch {
    /// No connection, or no answer in time: the gateway is taken to be down.
    Unreachable(String),
    /// It answered, but not with the document.
    Refused(String),
}

/// The gateway's one HTTP client, to the ops listener: never a proxy, the connect
/// bounded by `timeout`.
fn ops_client(ops_url: &str, timeout: Duration) -> Result<Client, String> {
    let target = url::Url::parse(ops_url).map_err(|e| e.to_string())?;
    crate::egress::client::local(&target, timeout)
}

/// `GET url`, the request and its answer's body bounded by `timeout` together.
async fn fetch(client: &Client, url: &str, timeout: Duration) -> Result<Vec<u8>, Fetch> {
    let unreachable = |why: &str| Err(Fetch::Unreachable(why.to_owned()));
    match local_get(client, url, Instant::now() + timeout).await {
        Err(LocalGetError::Url) => unreachable("not a URL"),
        Err(LocalGetError::NoAnswer) => unreachable("no answer in time"),
        Err(LocalGetError::Send(e)) if e.is_connect() => unreachable("connection refused or no route"),
        Err(LocalGetError::Send(e)) => unreachable(&e.to_string()),
        Err(LocalGetError::BodyCut { status, .. }) | Ok((status, _)) if !status.is_success() => {
            Err(Fetch::Refused(format!("{url} answered {status}")))
        }
        Err(LocalGetError::BodyCut { timed_out: true, .. }) => {
            Err(Fetch::Refused(format!("{url}: the answer broke off: no end in time")))
        }
        Err(LocalGetError::BodyCut { timed_out: false, .. }) => {
            Err(Fetch::Refused(format!("{url}: the answer broke off")))
        }
        Ok((_, body)) => Ok(body),
    }
}

/// `tunnelgate doctor --json`, run here (stdio servers are not started). With a secret
/// unresolved here it is what that command prints here: the configuration check failed
/// (and nothing is sent without its credentials).
async fn doctor(config: &OfflineConfig, options: &Options) -> Part {
    let doctor_options = crate::doctor::Options {
        timeout: options.timeout,
        spawn_stdio: false,
    };
    let report = match config.complete() {
        Ok(config) => crate::doctor::run(config, &doctor_options).await,
        Err(unresolved) => crate::doctor::invalid_config(unresolved),
    };
    Part {
        name: "doctor.json",
        body: report.render_json().into_bytes(),
        source: Source::InProcess {
            from: "tunnelgate doctor --json".to_owned(),
        },
    }
}

/// The file at `path` as it is, or absent: `missing` when there is none, else the error.
fn from_disk(name: &'static str, path: &Path, missing: &str) -> Part {
    let (body, source) = match std::fs::read(path) {
        Ok(body) => (
            body,
            Source::Disk {
                path: path.to_path_buf(),
            },
        ),
        Err(e) => {
            let reason = if e.kind() == std::io::ErrorKind::NotFound {
                format!("{missing} at {}", path.display())
            } else {
                format!("cannot read {}: {e}", path.display())
            };
            (Vec::new(), Source::Absent { reason })
        }
    };
    Part { name, body, source }
}

/// The receipt journal and its rotated file.
fn receipts(config: &Receipts) -> [Part; 2] {
    let path = &config.path;
    let rotated = crate::receipts::rotated_path(path);
    if !config.enabled {
        let off = |name| Part {
            name,
            body: Vec::new(),
            source: Source::Absent {
                reason: "receipts.enabled = false".to_owned(),
            },
        };
        return [off("receipts.jsonl"), off("receipts.jsonl.1")];
    }
    [
        from_disk("receipts.jsonl", path, "no receipt journal (no unclean command yet)"),
        from_disk("receipts.jsonl.1", &rotated, "no rotated receipt journal"),
    ]
}

/// The version, build profile and platform (API: `version.json`).
fn version() -> Part {
    let kernel = |name: &str| {
        std::fs::read_to_string(Path::new("/proc/sys/kernel").join(name))
            .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
    };
    let doc = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build_profile": env!("BUILT_WITH_PROFILE"),
        "debug_assertions": cfg!(debug_assertions),
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "kernel": {
            "name": kernel("ostype"),
            "release": kernel("osrelease"),
            "version": kernel("version"),
        },
    });
    Part::json_in_process("version.json", &doc, "this binary and /proc/sys/kernel")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_is_reached_on_loopback() {
        assert_eq!(ops_url("0.0.0.0:9464".parse().unwrap()), "http://127.0.0.1:9464/");
        assert_eq!(ops_url("[::]:9464".parse().unwrap()), "http://[::1]:9464/");
        assert_eq!(ops_url("127.0.0.2:1".parse().unwrap()), "http://127.0.0.2:1/");
    }

    #[test]
    fn a_missing_file_is_absent_with_its_reason_and_a_present_one_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latch.json");
        let part = from_disk("latch.json", &path, "no latch file (not latched)");
        assert_eq!(
            part.source.reason(),
            Some(format!("no latch file (not latched) at {}", path.display()).as_str())
        );
        std::fs::write(&path, "{\"x\":1}").unwrap();
        let part = from_disk("latch.json", &path, "unused");
        assert_eq!(
            (part.body.as_slice(), part.source.words()),
            (&b"{\"x\":1}"[..], format!("disk {}", path.display()))
        );
    }
}
