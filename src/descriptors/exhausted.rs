//! Test support: real errors of a full descriptor table, made in a child process.
//!
//! A test that needs one calls [`rerun_in_child`] first: in the test process it runs the
//! same test again in a child (this test binary, `--exact`), checks what the child
//! printed and returns `true`; in the child it returns `false`, and the test goes on to
//! [`fill_descriptor_table`], provoke the failure and [`report`] how it was classified.
//! Lowering the limit and filling the table in the child keeps every other test (and a
//! `cargo test` that runs them as threads of one process) out of it.

use std::process::Command;

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use super::is_exhaustion;

/// Set in the child: the test runs its exhausted half.
const CHILD_ENV: &str = "TUNNELGATE_TEST_DESCRIPTORS_EXHAUSTED";
/// Marks the child's finding in its output.
const REPORT_PREFIX: &str = "exhausted-child-classified:";
/// The child's soft descriptor limit: room for the runtime and the test's setup.
const CHILD_SOFT_LIMIT: u64 = 128;

/// In the test process: runs `test_path` (the test's full path in this binary) in a
/// child and asserts it reported `expected`; returns `true`. In the child: `false`.
pub(crate) fn rerun_in_child(test_path: &str, expected: &str) -> bool {
    if std::env::var_os(CHILD_ENV).is_some() {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([test_path, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("the test binary runs again as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the exhausted child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let found: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(REPORT_PREFIX).map(|(_, finding)| finding))
        .collect();
    assert!(
        !found.is_empty(),
        "the child ran no exhausted half (filter {test_path}):\n{stdout}"
    );
    assert_eq!(found, vec![expected], "the child's classification");
    true
}

/// Lowers this (child) process's soft limit and opens `/dev/null` until the kernel says
/// `EMFILE`, checked to be recognised as exhaustion. The returned files hold the table
/// full; dropping them frees it.
pub(crate) fn fill_descriptor_table() -> Vec<std::fs::File> {
    assert!(std::env::var_os(CHILD_ENV).is_some(), "only a child fills its table");
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, CHILD_SOFT_LIMIT.min(hard), hard).expect("lower the soft limit");
    let mut files = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => files.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                assert!(is_exhaustion(&e));
                return files;
            }
        }
    }
}

/// Prints the child's finding for [`rerun_in_child`] to check.
pub(crate) fn report(label: &str) {
    println!("{REPORT_PREFIX}{label}");
}
