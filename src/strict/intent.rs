//! The write-ahead intent: before an admitted command's first downstream step, a strict
//! gateway records durably that the command may be about to reach an MCP server; it
//! settles the record once the command's terminal response is acknowledged (or its leg
//! ended `not_sent`). A start that finds an unsettled record knows an earlier run died in
//! between, however it died (SIGKILL, OOM, abort, power), and latches
//! `interrupted_before_ack` before anything else.
//!
//! The record holds request id, channel, method, instance id and time: never payloads.
//! It sits behind [`IntentStore`], whose first backend is a file beside the latch file
//! ([`FileIntents`]); replicas on etcd share one (`coord::EtcdIntents`). Strict mode admits one
//! command at a time, so one record at a time is all there is.
//!
//! Durability costs one flush per strict command, and no more: the record file is created
//! once (temporary file, fsync, rename, directory fsync: the latch file's procedure), and
//! from then on each record overwrites it in place, padded to a whole number of blocks so
//! its size rarely changes, and is `fdatasync`ed before the command's first downstream
//! step. Settling overwrites it with a settled document and is not flushed at all.
//!
//! Why that is safe: the command is dispatched only after the flush returned, so a crash
//! that tears or loses a record write dispatched nothing, and whatever the file then
//! holds (the settled document: a clean start; a torn mix: unreadable, which fails
//! closed) is on the safe side. A settle lost to a crash leaves the record of a command
//! that was in fact acknowledged, and the next start latches on it: the conservative
//! side, documented.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use super::latch_file::{write_durably, ClassifyName};

/// One command that may have reached an MCP server and is not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub request_id: String,
    pub channel: String,
    pub method: Option<String>,
    /// The gateway instance that wrote it (`X-Tunnel-Client-Instance-Id`).
    pub instance_id: String,
    /// RFC 3339, UTC, seconds.
    pub written_at: String,
}

/// The on-disk document (schema_version 1); `intent` is null once settled. Trailing
/// spaces pad it to whole blocks.
#[derive(Debug, Serialize, Deserialize)]
struct IntentDocument {
    schema_version: u32,
    tunnelgate_version: String,
    intent: Option<Intent>,
}

/// A record's flush this slow is logged (the gateway's thread waited for it).
pub(crate) const SLOW_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// Records are padded to a multiple of this, so that an overwrite keeps the file's size.
const RECORD_BLOCK: usize = 4096;

/// Why the intent store failed. Messages name the path and the problem, never a payload.
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    #[error("cannot write the intent record {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot remove the intent record {path}: {source}")]
    Remove { path: PathBuf, source: std::io::Error },
    #[error("cannot read the intent record {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the intent record {path} exists but is not a tunnelgate intent (treated as unsettled): {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A shared store refused the record: this replica does not hold the lease (or a
    /// cluster-wide latch is set). Nothing was dispatched.
    #[error("the write-ahead intent was refused: {reason}")]
    Refused { reason: String },
    /// A shared store could not be reached, or answered with an error.
    #[error("the coordination store did not take the write-ahead intent: {reason}")]
    Unavailable { reason: String },
}

impl IntentError {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Write { .. } => "write",
            Self::Remove { .. } => "remove",
            Self::Read { .. } => "read",
            Self::Corrupt { .. } => "corrupt",
            Self::Refused { .. } => "refused",
            Self::Unavailable { .. } => "unavailable",
        }
    }
}

/// What a start finds.
#[derive(Debug)]
pub enum Unsettled {
    /// No record: the last run ended with nothing outstanding.
    None,
    /// A readable record.
    Intent(Intent),
    /// A record that exists but cannot be read: treated as unsettled (fail closed), with
    /// no command to name.
    Unreadable(IntentError),
}

/// A boxed future of the store: the trait stays usable behind `dyn`.
pub(crate) type IntentFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where intents are kept.
pub(crate) trait IntentStore: Send + Sync {
    /// Records `intent` durably; returns once it would survive a crash.
    fn record<'a>(&'a self, intent: &'a Intent) -> IntentFuture<'a, Result<(), IntentError>>;
    /// Settles the outstanding record, if any.
    fn settle(&self) -> IntentFuture<'_, Result<(), IntentError>>;
    /// What becomes of a record whose settle failed, for the log line that says so. The
    /// default is a shared store's: tried again while this replica's term lasts, and
    /// otherwise read by the next replica to become active. The file backend's is read
    /// by the next start.
    fn after_failed_settle(&self) -> &'static str {
        "the record stays in the coordination store and is tried again while this replica's term lasts; if it is still there, the next active latches interrupted_before_ack on it"
    }
    /// Whether a record would be asked for now at all: a shared store's own gate (this
    /// replica holds the lease and its renewal is not overdue). The poller asks it before
    /// every poll, so a replica that may not admit takes no command either. A local store
    /// always may.
    fn may_admit(&self) -> bool {
        true
    }
}

/// The file backend: one record at `path`. Cheap to clone: clones share the open file,
/// which is kept from the first record on, so that a gateway short of descriptors can
/// still record and settle.
#[derive(Clone, Debug)]
pub struct FileIntents {
    path: PathBuf,
    file: std::sync::Arc<std::sync::Mutex<Option<OpenRecord>>>,
}

/// The record file, open, and the length last written to it.
#[derive(Debug)]
struct OpenRecord {
    file: std::fs::File,
    len: u64,
}

impl FileIntents {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: Default::default(),
        }
    }

    /// The record beside `latch_file`: `latch.json` -> `latch.intent.json`.
    pub fn beside(latch_file: &Path) -> Self {
        Self::new(intent_path(latch_file))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `intent` (or the settled document) in place; flushed with `fdatasync` when
    /// `flush`. The first write creates the file durably. A record (flushed) first makes
    /// sure the open file is still the one at the path; a settle need not: a settle
    /// written to a file removed behind the gateway's back leaves no record at the path,
    /// which reads as settled too.
    fn write_now(&self, intent: Option<&Intent>, flush: bool) -> Result<(), IntentError> {
        let err = |source| IntentError::Write {
            path: self.path.clone(),
            source,
        };
        let bytes: std::borrow::Cow<'_, [u8]> = match intent {
            Some(intent) => document(Some(intent)).into(),
            None => SETTLED.as_slice().into(),
        };
        // Never held across an await.
        let mut open = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let record = match open.as_mut() {
            Some(record) if flush && links(&record.file).map_err(err)? == 0 => {
                // Removed behind the gateway's back: a write to it would be lost. Create
                // the record again, durably, and open that one next time.
                *open = None;
                return write_durably(&self.path, &bytes).map_err(err);
            }
            Some(record) => record,
            None => match std::fs::OpenOptions::new().write(true).open(&self.path) {
                Ok(file) => {
                    let len = length(&file).map_err(err)?;
                    open.insert(OpenRecord { file, len })
                }
                // Created once, with the directory entry made durable too; opened by the
                // next write.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return write_durably(&self.path, &bytes).map_err(err)
                }
                Err(e) => return Err(err(e)),
            },
        };
        use std::os::unix::fs::FileExt;
        record.file.write_all_at(&bytes, 0).map_err(err)?;
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if record.len != len {
            record.file.set_len(len).map_err(err)?;
            record.len = len;
        }
        if flush {
            record.file.sync_data().map_err(err)?;
        }
        Ok(())
    }

    /// Reads the record now (blocking).
    pub fn read(&self) -> Unsettled {
        let bytes = match super::latch_file::read_regular(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Unsettled::None,
            Err(source) => {
                return Unsettled::Unreadable(IntentError::Read {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        match serde_json::from_slice::<IntentDocument>(&bytes) {
            Ok(IntentDocument { intent: None, .. }) => Unsettled::None,
            Ok(IntentDocument { intent: Some(i), .. }) => Unsettled::Intent(i),
            Err(e) => Unsettled::Unreadable(IntentError::Corrupt {
                path: self.path.clone(),
                reason: format!("line {} column {}: {}", e.line(), e.column(), e.classify_name()),
            }),
        }
    }

    /// Removes the record now (blocking): `tunnelgate latch clear` and a start that has
    /// latched on it. `Ok(false)` when there was none.
    pub fn clear(&self) -> Result<bool, IntentError> {
        let unsettled = !matches!(self.read(), Unsettled::None);
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(unsettled),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(IntentError::Remove {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

impl IntentStore for FileIntents {
    /// Written and flushed on the calling thread, not handed to the blocking pool: the
    /// two hand-offs there and back cost as much as the flush itself (a fifth of strict
    /// mode's rate, docs/PERFORMANCE.md). The price: while the disk does not answer, the
    /// runtime thread waits for it, polls and the ops listener with it. A flush that
    /// takes [`SLOW_FLUSH`] or longer says so once it returns.
    fn record<'a>(&'a self, intent: &'a Intent) -> IntentFuture<'a, Result<(), IntentError>> {
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let written = self.write_now(Some(intent), true);
            let took = started.elapsed();
            if took >= SLOW_FLUSH {
                tracing::warn!(
                    path = %self.path.display(),
                    took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                    "the write-ahead intent's flush was slow: the gateway waited for its disk, and so did its polls and ops listener"
                );
            }
            written
        })
    }

    /// Not flushed (a settle lost to a crash errs on the safe side), so a page-cache
    /// write on the calling thread.
    fn settle(&self) -> IntentFuture<'_, Result<(), IntentError>> {
        Box::pin(async move { self.write_now(None, false) })
    }

    fn after_failed_settle(&self) -> &'static str {
        "the record stays, and the next start latches interrupted_before_ack on it"
    }
}

/// The settled document, the same for every settle.
static SETTLED: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| document(None));

/// The document for `intent` (null: settled), padded with spaces to whole blocks.
fn document(intent: Option<&Intent>) -> Vec<u8> {
    let doc = IntentDocument {
        schema_version: 1,
        tunnelgate_version: env!("CARGO_PKG_VERSION").to_owned(),
        intent: intent.cloned(),
    };
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("intent documents serialize");
    bytes.push(b'\n');
    let padded = bytes.len().div_ceil(RECORD_BLOCK) * RECORD_BLOCK;
    bytes.resize(padded, b' ');
    bytes
}

/// The file's link count, asked without its times. On Linux 6.13 and later (multigrain
/// timestamps) a stat that reads a file's times makes its next write take a fine-grained
/// timestamp, so the `fdatasync` after it writes the inode too: 47 us more per flush on
/// the benchmark machine (docs/PERFORMANCE.md).
#[cfg(target_os = "linux")]
fn links(file: &std::fs::File) -> std::io::Result<u64> {
    let stat = statx(file, rustix::fs::StatxFlags::NLINK)?;
    Ok(u64::from(stat.stx_nlink))
}

/// The file's length, asked without its times (see [`links`]).
#[cfg(target_os = "linux")]
fn length(file: &std::fs::File) -> std::io::Result<u64> {
    Ok(statx(file, rustix::fs::StatxFlags::SIZE)?.stx_size)
}

#[cfg(target_os = "linux")]
fn statx(file: &std::fs::File, mask: rustix::fs::StatxFlags) -> std::io::Result<rustix::fs::Statx> {
    rustix::fs::statx(file, "", rustix::fs::AtFlags::EMPTY_PATH, mask).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn links(file: &std::fs::File) -> std::io::Result<u64> {
    Ok(std::os::unix::fs::MetadataExt::nlink(&file.metadata()?))
}

#[cfg(not(target_os = "linux"))]
fn length(file: &std::fs::File) -> std::io::Result<u64> {
    Ok(file.metadata()?.len())
}

/// `latch.json` -> `latch.intent.json` (any extension is replaced; none is added to).
pub(crate) fn intent_path(latch_file: &Path) -> PathBuf {
    let stem = latch_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "latch".to_owned());
    latch_file.with_file_name(format!("{stem}.intent.json"))
}

impl Intent {
    /// An intent for the command, written now by `instance_id`.
    pub(crate) fn now(request_id: &str, channel: &str, method: Option<&str>, instance_id: &str) -> Self {
        Self {
            request_id: request_id.to_owned(),
            channel: channel.to_owned(),
            method: method.map(str::to_owned),
            instance_id: instance_id.to_owned(),
            written_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
