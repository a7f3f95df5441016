//! `tunnelgate support-bundle`: one archive an operator can hand over, known to carry
//! no secret.
//!
//! The parts ([`parts`]): the effective configuration as `check` prints it; `/status`,
//! `/metrics` and `/events` fetched through the ops listener; `doctor --json`, run in
//! process; the latch file, the intent record and the receipt journal read from disk;
//! the version, build profile and platform; and `MANIFEST.json`, naming each part, its
//! size and its source (the ops listener's URL, a path on disk, this process, or absent
//! with the reason). A gateway that does not answer is not an error: its parts are absent
//! and the manifest says why.
//!
//! Invariant: before a byte is written, [`scan::Canaries`] runs over every part (the
//! secrets the configuration resolves, and the shapes of keys and credentials); one hit
//! refuses the whole bundle, naming the part and the kind of secret, never the secret.
//! The archive is written beside its destination under a temporary name and moved into
//! place whole, so a refused or failed bundle leaves nothing behind.
//!
//! Reads the configuration, the ops listener (over HTTP), the files `strict` and
//! `receipts` write, and `doctor`; changes none of them. The configuration is loaded
//! offline ([`crate::config::OfflineConfig`]): a bundle needs no secret, a reference that
//! does not resolve here is shown unresolved, and `doctor` then reports that rather than
//! probe anything without its credentials.

mod archive;
mod parts;
pub(crate) mod scan;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub(crate) use parts::{collect, ops_url};
pub(crate) use scan::{Canaries, Leak};

/// Exit code of a bundle refused by the scan (nothing written).
pub(crate) const REFUSED_EXIT: u8 = 4;

/// One file of the archive.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// The file's name in the archive (e.g. `status.json`).
    pub name: &'static str,
    pub body: Vec<u8>,
    pub source: Source,
}

/// Where a part came from (API: the manifest's `source` words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Fetched from the running gateway.
    Ops { url: String },
    /// Read from a file.
    Disk { path: PathBuf },
    /// Made by this process (what it is made from).
    InProcess { from: String },
    /// Not in the archive, and why.
    Absent { reason: String },
}

/// What the parts are collected with.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// The ops listener's base URL, e.g. `http://127.0.0.1:9464/`.
    pub ops_url: String,
    /// Bound of each request to the ops listener and of each doctor check.
    pub timeout: Duration,
    /// Where the configuration came from, for the configuration part's source.
    pub config_path: Option<PathBuf>,
}

/// Every part, collected and not yet scanned.
#[derive(Debug)]
pub(crate) struct Collected {
    pub parts: Vec<Part>,
    /// Why the gateway's own parts are absent, when it did not answer.
    pub gateway_down: Option<String>,
}

/// Why no bundle was written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BundleError {
    #[error("--out {}: the file exists; pass --force to replace it", .0.display())]
    Exists(PathBuf),
    #[error("--out {}: {problem}", path.display())]
    Destination { path: PathBuf, problem: String },
    #[error("--out {}: cannot write the archive: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    /// The scan found a secret in `part` (the kinds named, never the values).
    #[error("refused: {part} carries {}; nothing was written", kinds(.leaks))]
    Refused { part: &'static str, leaks: Vec<Leak> },
}

/// The manifest (API: `MANIFEST.json`).
#[derive(Serialize)]
struct Manifest<'a> {
    schema_version: u32,
    created_at: String,
    tunnelgate_version: &'static str,
    gateway: String,
    scan: String,
    parts: Vec<ManifestEntry<'a>>,
}

#[derive(Serialize)]
struct ManifestEntry<'a> {
    name: &'a str,
    bytes: usize,
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

impl BundleError {
    /// Stable label for logs.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Exists(_) => "exists",
            Self::Destination { .. } => "destination",
            Self::Write { .. } => "write",
            Self::Refused { .. } => "refused",
        }
    }

    /// The command's exit code: [`REFUSED_EXIT`] for a refusal, 1 otherwise.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Refused { .. } => REFUSED_EXIT,
            Self::Exists(_) | Self::Destination { .. } | Self::Write { .. } => 1,
        }
    }
}

impl Source {
    /// The manifest's and the progress line's words: `ops listener URL`, `disk PATH`,
    /// `in process (FROM)`, `absent`.
    pub(crate) fn words(&self) -> String {
        match self {
            Self::Ops { url } => format!("ops listener {url}"),
            Self::Disk { path } => format!("disk {}", path.display()),
            Self::InProcess { from } => format!("in process ({from})"),
            Self::Absent { .. } => "absent".to_owned(),
        }
    }

    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            Self::Absent { reason } => Some(reason),
            _ => None,
        }
    }
}

impl Collected {
    /// Runs the scan over every part, then adds `MANIFEST.json` (scanned too): the parts
    /// to write, the absent ones left out (the manifest names them). The first part with
    /// a hit refuses the bundle.
    pub(crate) fn scanned(mut self, canaries: &Canaries) -> Result<Vec<Part>, BundleError> {
        for part in &self.parts {
            refuse_leaks(part, canaries)?;
        }
        let manifest = self.manifest(canaries);
        refuse_leaks(&manifest, canaries)?;
        self.parts.retain(|p| !matches!(p.source, Source::Absent { .. }));
        self.parts.push(manifest);
        Ok(self.parts)
    }

    fn manifest(&self, canaries: &Canaries) -> Part {
        let gateway = match &self.gateway_down {
            None => "running: its parts were fetched through the ops listener".to_owned(),
            Some(why) => format!(
                "not reachable ({why}): /status, /metrics and /events are absent; the files were read from disk"
            ),
        };
        let doc = Manifest {
            schema_version: 1,
            created_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            tunnelgate_version: env!("CARGO_PKG_VERSION"),
            gateway,
            scan: format!(
                "clean: every part was searched for {} configured secret values, PEM private keys and Authorization credentials",
                canaries.len()
            ),
            parts: self
                .parts
                .iter()
                .map(|p| ManifestEntry {
                    name: p.name,
                    bytes: p.body.len(),
                    source: p.source.words(),
                    reason: p.source.reason(),
                })
                .collect(),
        };
        Part::json_in_process("MANIFEST.json", &doc, "the parts above")
    }
}

impl Part {
    /// A JSON document made here: pretty-printed, one final newline, its source `in
    /// process (from)`.
    pub(crate) fn json_in_process(name: &'static str, doc: &impl Serialize, from: &str) -> Part {
        let mut body = serde_json::to_vec_pretty(doc).expect("a document of plain fields serializes");
        body.push(b'\n');
        Part {
            name,
            body,
            source: Source::InProcess { from: from.to_owned() },
        }
    }
}

fn refuse_leaks(part: &Part, canaries: &Canaries) -> Result<(), BundleError> {
    let leaks = canaries.find(&String::from_utf8_lossy(&part.body));
    if leaks.is_empty() {
        Ok(())
    } else {
        Err(BundleError::Refused { part: part.name, leaks })
    }
}

fn kinds(leaks: &[Leak]) -> String {
    let kinds: Vec<&str> = leaks.iter().map(|l| l.kind.as_str()).collect();
    kinds.join(" and ")
}

/// Checks `out` can be a new bundle before any part is collected: its folder exists,
/// it is not a folder, and it does not exist unless `force`.
pub(crate) fn check_destination(out: &Path, force: bool) -> Result<(), BundleError> {
    archive::check_destination(out, force)
}

/// Writes `parts` as one `.tar.gz` at `out`, whole or not at all; returns its size.
pub(crate) fn write(out: &Path, parts: &[Part], force: bool) -> Result<u64, BundleError> {
    archive::write(out, parts, force)
}

/// The default `--out`: `tunnelgate-support-YYYYMMDDTHHMMSSZ.tar.gz` in the current folder.
pub(crate) fn default_out() -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = stamp.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    PathBuf::from(format!("tunnelgate-support-{stamp}.tar.gz"))
}
