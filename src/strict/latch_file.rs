//! The persisted latch: written atomically (temp file, fsync, rename, directory fsync)
//! before a strict gateway exits fatal; honoured at the next start.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Fatal;

/// The on-disk document (schema_version 1).
#[derive(Debug, Serialize, Deserialize)]
struct LatchDocument {
    schema_version: u32,
    tunnelgate_version: String,
    fatal: Fatal,
}

#[derive(Debug, thiserror::Error)]
pub enum LatchFileError {
    #[error("cannot read latch file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("latch file {path} exists but is not a tunnelgate latch (treated as latched): {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot write latch file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot remove latch file {path}: {source}")]
    Remove { path: PathBuf, source: std::io::Error },
}

impl LatchFileError {
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Corrupt { .. } => "corrupt",
            Self::Write { .. } => "write",
            Self::Remove { .. } => "remove",
        }
    }
}

/// Writes the cause atomically. The file holds only the privacy-safe [`Fatal`].
pub(crate) fn write(path: &Path, fatal: &Fatal) -> Result<(), LatchFileError> {
    // A gateway out of descriptors must still persist its latch.
    crate::descriptors::release_reserve();
    let mut doc = LatchDocument {
        schema_version: 1,
        tunnelgate_version: env!("CARGO_PKG_VERSION").to_owned(),
        fatal: fatal.clone(),
    };
    doc.fatal.persisted = true;
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("latch documents serialize");
    bytes.push(b'\n');
    write_durably(path, &bytes).map_err(|source| LatchFileError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Replaces `path` with `bytes` so that after a crash it is either the old file (or
/// none) or wholly the new one: a temporary file beside it, fsynced, renamed over it, and
/// the directory fsynced. Creates the directory if needed.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "latch.json".into());
    let tmp = dir.join(format!(".{file_name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reads a persisted cause. `Ok(None)` when there is no file. A file that exists but does
/// not parse is an error the caller must treat as latched (fail closed).
pub fn read(path: &Path) -> Result<Option<Fatal>, LatchFileError> {
    let bytes = match read_regular(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LatchFileError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let doc: LatchDocument = serde_json::from_slice(&bytes).map_err(|e| LatchFileError::Corrupt {
        path: path.to_owned(),
        reason: format!("line {} column {}: {}", e.line(), e.column(), e.classify_name()),
    })?;
    Ok(Some(doc.fatal))
}

/// Most a latch or intent record may hold: both are a few hundred bytes.
const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// Reads a record that must be a regular file, without ever blocking: it is opened
/// non-blocking and its type read from the open descriptor, so a FIFO, a device or a
/// directory at the path is an error (the caller fails closed), never a hang.
pub(crate) fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {MAX_RECORD_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

/// Removes the latch file. `Ok(false)` when there was none.
pub fn clear(path: &Path) -> Result<bool, LatchFileError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(LatchFileError::Remove {
            path: path.to_owned(),
            source,
        }),
    }
}

pub(crate) trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io error",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "unexpected fields or values",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strict::{CommandRef, FatalCategory};

    #[test]
    fn a_written_latch_reads_back_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/latch.json");
        let fatal = Fatal::new(
            FatalCategory::AckTimeout,
            &CommandRef::new("req_1", "main", Some("tools/call")),
        );
        write(&path, &fatal).unwrap();
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back.category, FatalCategory::AckTimeout);
        assert!(back.persisted);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1,
            "no temp file left behind"
        );
        assert!(clear(&path).unwrap());
        assert!(!clear(&path).unwrap());
        assert!(read(&path).unwrap().is_none());
    }

    #[test]
    fn a_corrupt_latch_file_is_an_error_not_absence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latch.json");
        std::fs::write(&path, b"{\"schema_version\":1").unwrap();
        let err = read(&path).unwrap_err();
        assert_eq!(err.kind(), "corrupt");
        assert!(err.to_string().contains("truncated"));
    }
}
