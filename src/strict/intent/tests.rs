//! The file backend on a real directory.

use super::*;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tunnelgate-intent-{}-{}",
        std::process::id(),
        crate::protocol::random_hex(4)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_record_sits_beside_the_latch_file() {
    assert_eq!(
        intent_path(Path::new("/var/lib/tunnelgate/latch.json")),
        PathBuf::from("/var/lib/tunnelgate/latch.intent.json")
    );
    assert_eq!(
        intent_path(Path::new("state/latch")),
        PathBuf::from("state/latch.intent.json")
    );
}

#[tokio::test]
async fn a_recorded_intent_is_found_until_it_is_settled() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    assert!(matches!(store.read(), Unsettled::None));
    let intent = Intent::now("req-1", "main", Some("tools/call"), "abcd");
    store.record(&intent).await.unwrap();
    match store.read() {
        Unsettled::Intent(found) => assert_eq!(found, intent),
        other => panic!("expected the intent, got {other:?}"),
    }
    let text = std::fs::read_to_string(store.path()).unwrap();
    assert!(text.contains("\"schema_version\": 1"), "{text}");
    store.settle().await.unwrap();
    assert!(matches!(store.read(), Unsettled::None));
    // Settling twice is harmless; the record file stays (settled), padded to whole
    // blocks, and no temporary file is left behind.
    store.settle().await.unwrap();
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("latch.intent.json")]);
    assert_eq!(std::fs::metadata(store.path()).unwrap().len() % 4096, 0);
    // The next record overwrites it in place and is found again.
    let next = Intent::now("req-2", "main", None, "abcd");
    store.record(&next).await.unwrap();
    assert!(matches!(store.read(), Unsettled::Intent(i) if i == next));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_record_that_does_not_parse_is_unsettled_and_unreadable() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    std::fs::write(store.path(), b"{ half a record").unwrap();
    match store.read() {
        Unsettled::Unreadable(e) => assert_eq!(e.kind(), "corrupt"),
        other => panic!("a corrupt record fails closed, got {other:?}"),
    }
    assert!(store.clear().unwrap());
    assert!(!store.clear().unwrap());
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn a_record_that_cannot_be_written_is_an_error_naming_the_path() {
    let d = dir();
    // A directory where the record's directory should be: nothing can be created there.
    let blocker = d.join("blocked");
    std::fs::write(&blocker, b"a file, not a directory").unwrap();
    let store = FileIntents::beside(&blocker.join("latch.json"));
    let err = store.record(&Intent::now("r", "main", None, "i")).await.unwrap_err();
    assert_eq!(err.kind(), "write");
    assert!(err.to_string().contains("latch.intent.json"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn a_record_removed_behind_the_gateways_back_is_written_again() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    store.record(&Intent::now("first", "main", None, "i")).await.unwrap();
    // The second write opens the file and keeps it.
    store.settle().await.unwrap();
    std::fs::remove_file(store.path()).unwrap();
    let again = Intent::now("second", "main", None, "i");
    store.record(&again).await.unwrap();
    assert!(matches!(store.read(), Unsettled::Intent(i) if i == again));
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn the_file_takes_the_length_of_each_document_the_open_file_remembers_it() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    let len = || std::fs::metadata(store.path()).unwrap().len();
    store.record(&Intent::now("first", "main", None, "i")).await.unwrap();
    // Opened and kept by this settle; its length is asked once, at the open.
    store.settle().await.unwrap();
    assert_eq!(len(), 4096);
    // A record longer than one block grows the file; the next, shorter one shrinks it
    // again, with no stale bytes after the document.
    let long = Intent::now(&"r".repeat(5000), "main", None, "i");
    store.record(&long).await.unwrap();
    assert_eq!(len(), 2 * 4096);
    assert!(matches!(store.read(), Unsettled::Intent(i) if i == long));
    let short = Intent::now("short", "main", None, "i");
    store.record(&short).await.unwrap();
    assert_eq!(len(), 4096);
    assert!(matches!(store.read(), Unsettled::Intent(i) if i == short));
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn a_settle_after_the_file_was_removed_leaves_nothing_unsettled() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    store.record(&Intent::now("first", "main", None, "i")).await.unwrap();
    store.settle().await.unwrap();
    store.record(&Intent::now("second", "main", None, "i")).await.unwrap();
    std::fs::remove_file(store.path()).unwrap();
    // Written to the removed file: no record is left at the path, which reads as settled.
    store.settle().await.unwrap();
    assert!(matches!(store.read(), Unsettled::None));
    // The next record is at the path again.
    let third = Intent::now("third", "main", None, "i");
    store.record(&third).await.unwrap();
    assert!(matches!(store.read(), Unsettled::Intent(i) if i == third));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_fifo_where_the_record_should_be_fails_closed_at_once() {
    let d = dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    let made = std::process::Command::new("mkfifo").arg(store.path()).status().unwrap();
    assert!(made.success());
    // Nobody writes the FIFO: a blocking read would never return.
    match store.read() {
        Unsettled::Unreadable(e) => {
            assert_eq!(e.kind(), "read");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        other => panic!("a FIFO is not a record, got {other:?}"),
    }
    match crate::strict::latch_file::read(store.path()) {
        Err(e) => assert!(e.to_string().contains("not a regular file"), "{e}"),
        Ok(found) => panic!("a FIFO is not a latch, got {found:?}"),
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A store that keeps nothing: what a shared store says by default.
struct Shared;

impl IntentStore for Shared {
    fn record<'a>(&'a self, _: &'a Intent) -> IntentFuture<'a, Result<(), IntentError>> {
        Box::pin(async { Ok(()) })
    }

    fn settle(&self) -> IntentFuture<'_, Result<(), IntentError>> {
        Box::pin(async { Ok(()) })
    }
}

#[test]
fn a_failed_settle_says_who_latches_the_next_start_for_a_file_the_next_active_for_a_shared_store() {
    let file = FileIntents::beside(Path::new("/var/lib/tunnelgate/latch.json"));
    assert!(file.after_failed_settle().contains("the next start latches"));
    assert!(!file.after_failed_settle().contains("active"));
    assert!(Shared.after_failed_settle().contains("the next active latches"));
    assert!(!Shared.after_failed_settle().contains("next start"));
}
