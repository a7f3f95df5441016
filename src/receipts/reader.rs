//! Reading the journal back for `tunnelgate receipts`: the rotated file, then the current
//! one, so the newest line comes last; a line that does not parse (cut short by a full
//! disk, say) is skipped and counted, never fatal.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::record::{Receipt, Unclean};

/// One line of the journal, as written and as read.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The line as it is in the file (printed by `--json`).
    pub line: String,
    pub receipt: Receipt,
}

/// Every receipt of the journal, oldest first.
#[derive(Debug, Default)]
pub struct Listing {
    pub receipts: Vec<Listed>,
    /// Lines that are not receipts.
    pub skipped: usize,
}

/// Which receipts to list.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only those finished at or after this time.
    pub since: Option<SystemTime>,
    /// Only those unclean in one of these ways; empty: all.
    pub outcomes: Vec<Unclean>,
}

/// Why the journal could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "no receipts journal at {} (nor {}): nothing was written there yet, or receipts.path points elsewhere, or receipts.enabled is false",
        path.display(),
        rotated.display()
    )]
    Missing { path: PathBuf, rotated: PathBuf },
    #[error("cannot read the receipts journal {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: std::io::Error },
}

impl ReadError {
    /// Stable label for logs.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "missing",
            Self::Unreadable { .. } => "unreadable",
        }
    }
}

impl Filter {
    pub fn keeps(&self, receipt: &Receipt) -> bool {
        let recent = self
            .since
            .is_none_or(|since| receipt.finished().is_some_and(|t| t >= since));
        recent && (self.outcomes.is_empty() || self.outcomes.iter().any(|o| o.matches(receipt)))
    }
}

/// Where the journal at `path` is rotated to: `PATH.1`.
pub fn rotated_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// The journal at `path` and its rotated file, oldest line first. Missing only when
/// neither file exists.
pub fn read(path: &Path) -> Result<Listing, ReadError> {
    let rotated = rotated_path(path);
    let older = read_text(&rotated)?;
    let newer = read_text(path)?;
    if older.is_none() && newer.is_none() {
        return Err(ReadError::Missing {
            path: path.to_owned(),
            rotated,
        });
    }
    let mut listing = Listing::default();
    for text in [older, newer].into_iter().flatten() {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Receipt>(line) {
                Ok(receipt) => listing.receipts.push(Listed {
                    line: line.to_owned(),
                    receipt,
                }),
                Err(_) => listing.skipped += 1,
            }
        }
    }
    Ok(listing)
}

/// The file's text; `None` when it does not exist. Invalid UTF-8 is replaced (the line
/// then fails to parse and is skipped).
fn read_text(path: &Path) -> Result<Option<String>, ReadError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReadError::Unreadable {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn line(request_id: &str, leg: &str, delivery: &str, finished_at: &str) -> String {
        serde_json::json!({
            "schema_version": 1, "request_id": request_id, "channel": "main", "command_type": "jsonrpc",
            "method": "tools/call", "leg_outcome": leg, "delivery_outcome": delivery, "message": null,
            "attempts": 1, "received_at": finished_at, "finished_at": finished_at, "strict": false,
            "fatal_category": null
        })
        .to_string()
    }

    #[test]
    fn the_rotated_file_comes_first_and_lines_that_are_not_receipts_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("receipts.jsonl");
        let t = "2026-01-01T00:00:00.000Z";
        let older = format!("{}\n", line("old", "answered", "not_found", t));
        std::fs::write(rotated_path(&path), older).unwrap();
        let newer = format!(
            "{}\n{{\"cut sho\n\n{}\n",
            line("a", "abandoned", "acked", t),
            line("b", "answered", "rejected", t)
        );
        std::fs::write(&path, newer).unwrap();
        let listing = read(&path).unwrap();
        let ids: Vec<_> = listing.receipts.iter().map(|l| l.receipt.request_id.as_str()).collect();
        assert_eq!(ids, ["old", "a", "b"]);
        assert_eq!(listing.skipped, 1);
        assert_eq!(
            listing.receipts[1].line,
            line("a", "abandoned", "acked", t),
            "kept as written"
        );
    }

    #[test]
    fn only_a_journal_with_neither_file_is_missing_and_a_directory_is_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("receipts.jsonl");
        let missing = read(&path).unwrap_err();
        assert_eq!(missing.kind(), "missing");
        assert!(missing.to_string().contains("receipts.jsonl.1"), "{missing}");
        std::fs::write(rotated_path(&path), "").unwrap();
        assert!(
            read(&path).unwrap().receipts.is_empty(),
            "a rotated file alone is a journal"
        );
        let unreadable = read(dir.path()).unwrap_err();
        assert_eq!(unreadable.kind(), "unreadable", "{unreadable}");
    }

    #[test]
    fn the_filter_keeps_recent_receipts_of_the_outcomes_asked_for() {
        let receipt = |leg, delivery, at| serde_json::from_str::<Receipt>(&line("r", leg, delivery, at)).unwrap();
        let old = receipt("abandoned", "acked", "2020-01-01T00:00:00.000Z");
        let new = receipt("answered", "ambiguous", "2030-01-01T00:00:00.000Z");
        let since = Filter {
            since: Some(humantime::parse_rfc3339("2025-01-01T00:00:00Z").unwrap()),
            outcomes: vec![],
        };
        assert!(!since.keeps(&old) && since.keeps(&new));
        let abandoned = Filter {
            since: None,
            outcomes: vec![Unclean::Abandoned],
        };
        assert!(abandoned.keeps(&old) && !abandoned.keeps(&new));
        let either = Filter {
            since: None,
            outcomes: vec![Unclean::Rejected, Unclean::Ambiguous],
        };
        assert!(!either.keeps(&old) && either.keeps(&new));
        assert!(Filter::default().keeps(&old) && Filter::default().keeps(&new));
        let unparsable = Receipt {
            finished_at: "yesterday".to_owned(),
            ..new
        };
        assert!(!Filter {
            since: Some(SystemTime::now() - Duration::from_secs(60)),
            outcomes: vec![]
        }
        .keeps(&unparsable));
    }
}
