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
    pub fn kind(&self) -> &'static str {
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
