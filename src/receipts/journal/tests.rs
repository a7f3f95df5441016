use std::time::Duration;

use super::*;
use crate::app::GatewayLabels;
use crate::control::{AttemptResult, Delivery};
use crate::protocol::decode_poll;
use crate::receipts::read;

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new::<GatewayLabels>(false, &[]))
}

fn command(request_id: &str) -> Command {
    let body = serde_json::json!({"commands": [{
        "request_id": request_id, "shard_token": "s", "command_type": "jsonrpc", "channel": "main",
        "headers": {}, "jsonrpc": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}
    }]});
    decode_poll(body.to_string().as_bytes())
        .unwrap()
        .pop()
        .unwrap()
        .unwrap()
}

fn receipt(request_id: &str) -> Receipt {
    let outcomes = Outcomes {
        delivery: Some(Delivery::NotFound),
        attempts: 1,
        ..Outcomes::default()
    };
    let now = SystemTime::now();
    Receipt::of(&command(request_id), false, &outcomes, now, now).unwrap()
}

/// The value of `series` (a full series name with labels) in `metrics`.
fn value(metrics: &Metrics, series: &str) -> u64 {
    let text = metrics.render();
    let line = text
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn dropped(metrics: &Metrics, reason: &str) -> u64 {
    value(
        metrics,
        &format!("tunnelgate_receipts_dropped_total{{reason=\"{reason}\"}}"),
    )
}

#[test]
fn the_file_rotates_before_a_line_would_pass_its_bound_and_keeps_one_rotated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("receipts.jsonl");
    let line_len = receipt("req_00").to_line().len() as u64 + 1;
    // Room for three lines per file.
    let mut file = JournalFile::new(&path, line_len * 3 + line_len / 2);
    let ids: Vec<String> = (0..10).map(|i| format!("req_{i:02}")).collect();
    for chunk in ids.chunks(4) {
        let receipts: Vec<Receipt> = chunk.iter().map(|id| receipt(id)).collect();
        let appended = file.append(&receipts);
        assert!(appended.failure.is_none(), "{appended:?}");
        assert_eq!(appended.written, receipts.len());
    }
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(size(&path) <= line_len * 3, "the current file is bounded");
    assert!(
        size(&rotated_path(&path)) <= line_len * 3,
        "the rotated file is bounded"
    );
    assert!(!dir.path().join("receipts.jsonl.2").exists(), "one rotated file only");
    let listed: Vec<String> = read(&path)
        .unwrap()
        .receipts
        .into_iter()
        .map(|l| l.receipt.request_id)
        .collect();
    assert_eq!(
        listed,
        ["req_06", "req_07", "req_08", "req_09"],
        "three lines in the rotated file, then the current one's: the newest, oldest first"
    );
}

#[test]
fn a_missing_directory_is_created_and_an_existing_file_is_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new").join("receipts.jsonl");
    assert_eq!(
        JournalFile::new(&path, MAX_FILE_BYTES).append(&[receipt("a")]).written,
        1
    );
    assert_eq!(
        JournalFile::new(&path, MAX_FILE_BYTES).append(&[receipt("b")]).written,
        1
    );
    let listing = read(&path).unwrap();
    assert_eq!(listing.receipts.len(), 2);
    assert_eq!(listing.skipped, 0);
}

#[test]
fn a_full_disk_and_an_unusable_path_fail_the_batch_with_their_reasons() {
    let full = JournalFile::new(Path::new("/dev/full"), 1).append(&[receipt("a"), receipt("b")]);
    let (reason, lines, _) = full.failure.expect("/dev/full refuses every write");
    assert_eq!((full.written, reason, lines), (0, ReceiptDropReason::DiskFull, 2));
    assert!(Path::new("/dev/full").exists(), "a device is never rotated away");

    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let broken = JournalFile::new(&not_a_dir.join("receipts.jsonl"), MAX_FILE_BYTES).append(&[receipt("a")]);
    let (reason, lines, _) = broken.failure.expect("a path under a file cannot be opened");
    assert_eq!((reason, lines), (ReceiptDropReason::WriteFailed, 1));
}

#[test]
fn a_full_queue_and_an_ended_writer_drop_lines_counted_without_waiting() {
    let m = metrics();
    let (journal, rx) = Journal::channel(m.clone(), 1);
    journal.submit(receipt("a"));
    journal.submit(receipt("b"));
    assert_eq!(dropped(&m, "queue_full"), 1);
    drop(rx);
    journal.submit(receipt("c"));
    assert_eq!(dropped(&m, "stopped"), 1);
    assert_eq!(dropped(&m, "disk_full"), 0, "every reason exists from the start");
    Journal::off(m.clone()).submit(receipt("d"));
    assert_eq!(
        dropped(&m, "stopped") + dropped(&m, "queue_full"),
        2,
        "off counts nothing"
    );
}

#[tokio::test]
async fn a_pending_receipt_is_handed_over_when_dropped_and_only_when_unclean() {
    let (journal, mut rx) = Journal::channel(metrics(), 8);
    let (clean, unclean) = (command("req_clean"), command("req_lost"));
    let report = |delivery| DeliveryReport {
        delivery,
        last_attempt: AttemptResult::Ok,
        attempts: 2,
        refused: None,
    };
    {
        let p = journal.pending(&clean, Instant::now(), false);
        p.leg_ended(LegOutcome::Answered, None);
        p.delivered(&report(Delivery::Acked));
    }
    {
        let p = journal.pending(&unclean, Instant::now(), true);
        p.leg_ended(LegOutcome::Abandoned, Some(crate::protocol::ABANDONED_MESSAGE));
        p.delivered(&report(Delivery::Ambiguous));
        p.latched(FatalCategory::DownstreamAmbiguous);
    }
    let r = rx.try_recv().expect("the unclean command's receipt");
    assert!(rx.try_recv().is_err(), "the clean command wrote nothing");
    assert_eq!(r.request_id, "req_lost");
    assert_eq!(r.leg_outcome.as_deref(), Some("abandoned"));
    assert_eq!(r.delivery_outcome.as_deref(), Some("ambiguous"));
    assert_eq!(r.message.as_deref(), Some(crate::protocol::ABANDONED_MESSAGE));
    assert_eq!((r.attempts, r.strict), (2, true));
    assert_eq!(r.fatal_category.as_deref(), Some("downstream_ambiguous"));
}

#[tokio::test]
async fn the_writer_writes_what_was_queued_before_its_stop_then_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("receipts.jsonl");
    let m = metrics();
    let stop = CancellationToken::new();
    let (journal, writer) = Journal::start(&path, &Supervisor::logging_only(), m.clone(), stop.clone());
    for id in ["a", "b", "c"] {
        journal.submit(receipt(id));
    }
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer ends after its stop")
        .expect("without a panic");
    assert_eq!(read(&path).unwrap().receipts.len(), 3);
    assert_eq!(value(&m, "tunnelgate_receipts_written_total"), 3);
    journal.submit(receipt("late"));
    assert_eq!(dropped(&m, "stopped"), 1, "a line after the end is counted");
}
