//! The journal: a command's [`Pending`] receipt, handed over when its task ends; the
//! bounded queue; the one writer task and its file ([`JournalFile`]).
//!
//! Nothing here can delay a command: [`Journal::submit`] is a `try_send`, and a full
//! queue drops the line (`queue_full`). The writer runs each batch's file I/O on the
//! blocking pool; a full disk (`disk_full`) or any other failure to open, rotate or
//! write (`write_failed`) drops the lines it could not write, counted, and the next
//! batch tries again (the file is opened afresh for each batch, so a file removed or a
//! disk freed is picked up). A line submitted after the writer ended is `stopped`.
//!
//! The writer is spawned among the supervisor's background tasks as a joined task: its
//! end, or its panic, never latches nor turns the gateway unready (receipts are
//! evidence, not delivery); what it could not write is counted instead. At the end of a
//! run it writes what is queued, then ends ([`Journal::start`]'s stop token).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reader::rotated_path;
use super::record::{Outcomes, Receipt};
use crate::control::DeliveryReport;
use crate::downstream::LegOutcome;
use crate::health::Health;
use crate::protocol::Command;
use crate::strict::FatalCategory;
use crate::supervisor::Supervisor;
use crate::telemetry::{Metrics, ReceiptDropReason};

/// The most bytes the journal file holds before it is rotated to `PATH.1` (which
/// replaces the previous `PATH.1`): at most twice this on disk.
pub(crate) const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Receipts queued for the writer at most; one more is dropped (`queue_full`).
const QUEUE_CAPACITY: usize = 1024;

/// Receipts the writer takes from the queue for one round of file I/O.
const BATCH: usize = 64;

/// Where finished commands hand their receipts. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Journal {
    /// `None`: `receipts.enabled = false`.
    tx: Option<mpsc::Sender<Receipt>>,
    metrics: Arc<Metrics>,
    /// Where the last receipts are shown (`/status` `recent_receipts`), when anywhere.
    shown: Option<Arc<Health>>,
}

/// One command's receipt while the command runs: its outcomes as the lifecycle learns
/// them. Handed to the journal when dropped, however the command's task ends; a clean
/// command's is discarded.
pub(crate) struct Pending<'a> {
    journal: &'a Journal,
    cmd: &'a Command,
    received_at: Instant,
    strict: bool,
    outcomes: Mutex<Outcomes>,
}

/// The journal's file and its rotated sibling, bounded by `max_bytes` each.
#[derive(Debug)]
pub(crate) struct JournalFile {
    path: PathBuf,
    rotated: PathBuf,
    max_bytes: u64,
    /// The file's size, read when it is opened and counted up as lines are written.
    size: u64,
    /// Whether the file is a regular file (only one is ever rotated: `/dev/full` or a
    /// FIFO named as the path is written to, never renamed).
    regular: bool,
}

/// What one [`JournalFile::append`] did.
#[derive(Debug)]
pub(crate) struct Appended {
    pub written: usize,
    /// The lines not written (the rest of the batch), why, and the error.
    pub failure: Option<(ReceiptDropReason, usize, std::io::Error)>,
}

impl Journal {
    /// No journal (`receipts.enabled = false`): every receipt is discarded, uncounted.
    pub(crate) fn off(metrics: Arc<Metrics>) -> Self {
        Self {
            tx: None,
            metrics,
            shown: None,
        }
    }

    /// Starts the writer of `path` among `supervisor`'s background tasks. When `stop` is
    /// cancelled it writes what is queued and ends; the handle says how it ended.
    pub(crate) fn start(
        path: &Path,
        supervisor: &Supervisor,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let writer = Writer {
            file: JournalFile::new(path, MAX_FILE_BYTES),
            supervisor: supervisor.clone(),
            metrics: metrics.clone(),
            failing: None,
        };
        let handle = supervisor.spawn_joined(writer.run(rx, stop));
        (
            Self {
                tx: Some(tx),
                metrics,
                shown: None,
            },
            handle,
        )
    }

    /// A journal whose receipts go to the returned receiver, queued up to `capacity`.
    #[cfg(test)]
    pub(crate) fn channel(metrics: Arc<Metrics>, capacity: usize) -> (Self, mpsc::Receiver<Receipt>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Self {
                tx: Some(tx),
                metrics,
                shown: None,
            },
            rx,
        )
    }

    /// Also keeps the last receipts handed to it in `health`, for `/status`.
    pub(crate) fn showing_recent(mut self, health: Arc<Health>) -> Self {
        self.shown = Some(health);
        self
    }

    /// Hands `receipt` to the writer, never waiting: a full queue or an ended writer
    /// drops it, counted.
    pub(crate) fn submit(&self, receipt: Receipt) {
        let Some(tx) = &self.tx else { return };
        if let Some(health) = &self.shown {
            health.receipt_recorded(receipt.to_line());
        }
        let reason = match tx.try_send(receipt) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => ReceiptDropReason::QueueFull,
            Err(mpsc::error::TrySendError::Closed(_)) => ReceiptDropReason::Stopped,
        };
        self.metrics.receipts_dropped(reason, 1);
    }

    /// The receipt of `cmd`, received at `received_at`, to be filled in as it runs.
    pub(crate) fn pending<'a>(&'a self, cmd: &'a Command, received_at: Instant, strict: bool) -> Pending<'a> {
        Pending {
            journal: self,
            cmd,
            received_at,
            strict,
            outcomes: Mutex::new(Outcomes::default()),
        }
    }
}

impl Pending<'_> {
    /// The downstream leg ended with `outcome`; `words` are those of the gateway's own
    /// error, when it synthesized one for the caller.
    pub(crate) fn leg_ended(&self, outcome: LegOutcome, words: Option<&'static str>) {
        self.update(|o| {
            o.leg = Some(outcome);
            o.words = words;
        });
    }

    /// The gateway is about to post its own error with these words.
    pub(crate) fn told(&self, words: &'static str) {
        self.update(|o| o.words = Some(words));
    }

    /// The terminal response's delivery ended.
    pub(crate) fn delivered(&self, report: &DeliveryReport) {
        self.update(|o| {
            o.delivery = Some(report.delivery);
            o.attempts = report.attempts;
        });
    }

    /// This command latched the fence with `category`.
    pub(crate) fn latched(&self, category: FatalCategory) {
        self.update(|o| o.fatal = Some(category));
    }

    fn update(&self, change: impl FnOnce(&mut Outcomes)) {
        change(&mut self.outcomes.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.journal.tx.is_none() {
            return;
        }
        let outcomes = *self.outcomes.get_mut().unwrap_or_else(PoisonError::into_inner);
        if outcomes.is_clean() {
            // The common case: no clock read, nothing built.
            return;
        }
        let finished = SystemTime::now();
        let received = finished.checked_sub(self.received_at.elapsed()).unwrap_or(finished);
        if let Some(receipt) = Receipt::of(self.cmd, self.strict, &outcomes, received, finished) {
            self.journal.submit(receipt);
        }
    }
}

/// The writer task's state.
struct Writer {
    file: JournalFile,
    supervisor: Supervisor,
    metrics: Arc<Metrics>,
    /// The reason of the last failure, until a line is written again (logged on change).
    failing: Option<ReceiptDropReason>,
}

impl Writer {
    /// Writes batches until `stop`, then what is still queued.
    async fn run(mut self, mut rx: mpsc::Receiver<Receipt>, stop: CancellationToken) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let open = tokio::select! {
                biased;
                // cancel-safe: nothing is lost; what is queued is taken below.
                () = stop.cancelled() => false,
                // cancel-safe: `recv_many` loses nothing when dropped.
                n = rx.recv_many(&mut batch, BATCH) => n > 0,
            };
            if !open {
                rx.close();
                while let Ok(receipt) = rx.try_recv() {
                    batch.push(receipt);
                }
            }
            if !batch.is_empty() {
                let lines = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                self.write(lines).await;
            }
            if !open {
                return;
            }
        }
    }

    /// One batch's file I/O on the blocking pool, and its accounting.
    async fn write(&mut self, lines: Vec<Receipt>) {
        let count = lines.len();
        let fresh = self.file.fresh();
        let mut file = std::mem::replace(&mut self.file, fresh);
        let job = self.supervisor.spawn_blocking(move || {
            let appended = file.append(&lines);
            (file, appended)
        });
        let appended = match job.await {
            Ok((file, appended)) => {
                self.file = file;
                appended
            }
            // A panic in the file I/O: the batch is lost; the file is opened afresh.
            Err(_) => Appended {
                written: 0,
                failure: Some((
                    ReceiptDropReason::WriteFailed,
                    count,
                    std::io::Error::other("the receipt writer panicked"),
                )),
            },
        };
        self.account(appended);
    }

    fn account(&mut self, appended: Appended) {
        let path = self.file.path.display();
        if appended.written > 0 {
            self.metrics.receipts_written(appended.written as u64);
            if self.failing.take().is_some() {
                tracing::info!(path = %path, "delivery receipts are written again");
            }
        }
        let Some((reason, lines, error)) = appended.failure else {
            return;
        };
        self.metrics.receipts_dropped(reason, lines as u64);
        if self.failing.replace(reason) != Some(reason) {
            tracing::warn!(
                path = %path,
                reason = reason.as_str(),
                error = %error,
                "delivery receipts cannot be written; they are dropped and counted (tunnelgate_receipts_dropped_total), commands are not affected"
            );
        }
    }
}

impl JournalFile {
    /// The journal at `path`, rotated to `PATH.1` past `max_bytes`.
    pub(crate) fn new(path: &Path, max_bytes: u64) -> Self {
        Self {
            path: path.to_owned(),
            rotated: rotated_path(path),
            max_bytes,
            size: 0,
            regular: false,
        }
    }

    /// The same journal, nothing known about its file yet.
    fn fresh(&self) -> Self {
        Self::new(&self.path, self.max_bytes)
    }

    /// Appends one line per receipt, rotating first whenever the next line would take
    /// the file past its bound (a file holding nothing yet takes any line). Stops at the
    /// first failure: the lines before it are written, the rest are not.
    pub(crate) fn append(&mut self, receipts: &[Receipt]) -> Appended {
        let failed = |written: usize, error: std::io::Error| Appended {
            written,
            failure: Some((drop_reason(&error), receipts.len() - written, error)),
        };
        let mut file = match self.open() {
            Ok(file) => file,
            Err(e) => return failed(0, e),
        };
        for (i, receipt) in receipts.iter().enumerate() {
            let mut line = receipt.to_line();
            line.push('\n');
            let len = line.len() as u64;
            let written = self
                .make_room(&mut file, len)
                .and_then(|()| file.write_all(line.as_bytes()));
            if let Err(e) = written {
                return failed(i, e);
            }
            self.size += len;
        }
        Appended {
            written: receipts.len(),
            failure: None,
        }
    }

    /// Opens the file for appending (its directory created if missing), and reads its size.
    fn open(&mut self) -> std::io::Result<File> {
        let open = || OpenOptions::new().append(true).create(true).open(&self.path);
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                open()?
            }
            other => other?,
        };
        let meta = file.metadata()?;
        self.regular = meta.is_file();
        self.size = meta.len();
        Ok(file)
    }

    /// Rotates when a line of `len` bytes would take a non-empty regular file past its
    /// bound: the file becomes `PATH.1` and a new one is started.
    fn make_room(&mut self, file: &mut File, len: u64) -> std::io::Result<()> {
        if !self.regular || self.size == 0 || self.size + len <= self.max_bytes {
            return Ok(());
        }
        std::fs::rename(&self.path, &self.rotated)?;
        *file = OpenOptions::new().append(true).create(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Why a write failed, as counted.
fn drop_reason(error: &std::io::Error) -> ReceiptDropReason {
    use std::io::ErrorKind as K;
    match error.kind() {
        K::StorageFull | K::QuotaExceeded => ReceiptDropReason::DiskFull,
        _ => ReceiptDropReason::WriteFailed,
    }
}

#[cfg(test)]
mod tests;
