//! The checks on this machine: the latch directory is writable, the ops address is
//! free, and no persisted latch is waiting.
//!
//! Invariants: every probe undoes itself (the temp file and any directory it had to
//! create are removed; the listener is closed at once); the latch file is only read.
//! Paths are printed (they are configuration, not secrets); the latch's own line is
//! privacy-safe by construction.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::report::Check;
use crate::config::Config;
use crate::strict::latch_file::{self, LatchFileError};
use crate::strict::Fatal;

/// `strict.latch_file`'s directory takes a new file, as the latch write needs (it
/// creates missing directories, then writes a temp file beside the latch).
pub(super) fn latch_dir(config: &Config) -> Check {
    const NAME: &str = "latch_dir";
    if !config.strict.enabled {
        return Check::warn(NAME, "skipped: strict.enabled is false, so no latch is ever written");
    }
    let dir = latch_parent(&config.strict.latch_file);
    match probe_dir(&dir) {
        Ok(()) => Check::ok(
            NAME,
            format!("{} takes a new file (created and removed)", dir.display()),
        ),
        Err(e) => Check::fail(
            NAME,
            format!(
                "cannot write a file in {} ({}): a latch could not be persisted; fix the directory or set strict.latch_file",
                dir.display(),
                e.kind()
            ),
        ),
    }
}

/// `ops.listen` can be bound (and is released at once).
pub(super) async fn ops_listen(config: &Config) -> Check {
    const NAME: &str = "ops_listen";
    let addr = config.ops.listen;
    match crate::ops::bind(addr).await {
        Ok(listener) => {
            drop(listener);
            Check::ok(NAME, format!("{addr} is free (bound and released)"))
        }
        Err(e) => Check::fail(NAME, bind_words(addr, &e)),
    }
}

/// No persisted latch at `strict.latch_file`; with one, a strict gateway refuses to
/// start (exit 89).
pub(super) fn latch_file(config: &Config) -> Check {
    const NAME: &str = "latch_file";
    let path = &config.strict.latch_file;
    let strict = config.strict.enabled;
    let found = match latch_file::read(path) {
        Ok(None) => return Check::ok(NAME, format!("no latch at {}", path.display())),
        Ok(Some(fatal)) => Found::Latch(fatal),
        Err(e) => Found::Unreadable(e),
    };
    let detail = latch_words(&found, path, strict);
    if strict {
        Check::fail(NAME, detail)
    } else {
        Check::warn(NAME, detail)
    }
}

/// What is at the latch path.
enum Found {
    Latch(Fatal),
    Unreadable(LatchFileError),
}

fn latch_words(found: &Found, path: &Path, strict: bool) -> String {
    let what = match found {
        Found::Latch(fatal) => fatal.one_line(),
        Found::Unreadable(e) => e.to_string(),
    };
    let clear = format!("tunnelgate latch clear --latch-file {}", path.display());
    if strict {
        format!("{what}; a strict gateway refuses to start (exit 89): reconcile the latched request, then `{clear}`")
    } else {
        format!("{what}; not honoured while strict.enabled is false; clear it with `{clear}`")
    }
}

fn bind_words(addr: SocketAddr, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "another process (a running gateway?) holds ops.listen ({addr}): stop it, or set ops.listen to a free address"
        ),
        std::io::ErrorKind::AddrNotAvailable => format!(
            "ops.listen ({addr}) is not an address of this machine: fix ops.listen"
        ),
        kind => format!("cannot listen on ops.listen ({addr}): {kind}"),
    }
}

/// The directory the latch is written in (`.` for a bare file name).
fn latch_parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Creates what is missing of `dir`, writes and removes a temp file in it, then removes
/// the directories it created (innermost first).
fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let created = missing_ancestors(dir);
    let result = std::fs::create_dir_all(dir).and_then(|()| probe_file(dir));
    for made in &created {
        let _ = std::fs::remove_dir(made);
    }
    result
}

/// `dir` and its ancestors that do not exist yet, innermost first.
fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .map(Path::to_owned)
        .collect()
}

fn probe_file(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(format!(
        ".tunnelgate-doctor.{}.{}",
        std::process::id(),
        crate::protocol::random_hex(4)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| {
            f.write_all(b"tunnelgate doctor\n")?;
            f.sync_all()
        });
    let removed = std::fs::remove_file(&path);
    match (written, removed) {
        (Err(e), _) => Err(e),
        (Ok(()), removed) => removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strict::CommandRef;
    use tunnelgate::FatalCategory;

    #[test]
    fn a_missing_directory_is_probed_and_removed_again() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        probe_dir(&dir).unwrap();
        assert!(!root.path().join("a").exists(), "created directories are removed");
        probe_dir(root.path()).unwrap();
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "no temp file left");
    }

    #[test]
    fn a_file_where_a_directory_is_expected_fails_the_probe() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(probe_dir(&file.join("sub")).is_err());
        assert!(probe_dir(&file).is_err());
        assert!(file.is_file(), "the file is left alone");
    }

    #[test]
    fn the_latch_directory_of_a_bare_file_name_is_the_working_directory() {
        assert_eq!(latch_parent(Path::new("latch.json")), PathBuf::from("."));
        assert_eq!(
            latch_parent(Path::new("/var/lib/t/latch.json")),
            PathBuf::from("/var/lib/t")
        );
    }

    #[test]
    fn a_latch_says_its_cause_and_how_to_clear_it() {
        let fatal = Fatal::new(
            FatalCategory::AckTimeout,
            &CommandRef::new("req_1", "main", Some("tools/call")),
        );
        let path = Path::new("/var/lib/t/latch.json");
        let strict = latch_words(&Found::Latch(fatal.clone()), path, true);
        assert!(
            strict.starts_with("fatal latch: category=ack_timeout exit_code=80"),
            "{strict}"
        );
        assert!(strict.contains("refuses to start (exit 89)"), "{strict}");
        assert!(
            strict.contains("`tunnelgate latch clear --latch-file /var/lib/t/latch.json`"),
            "{strict}"
        );
        let default = latch_words(&Found::Latch(fatal), path, false);
        assert!(
            default.contains("not honoured while strict.enabled is false"),
            "{default}"
        );
    }

    #[test]
    fn a_taken_address_names_the_likely_holder() {
        let addr: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        let in_use = bind_words(addr, &std::io::Error::from(std::io::ErrorKind::AddrInUse));
        assert!(in_use.starts_with("another process (a running gateway?) holds ops.listen (127.0.0.1:9464)"));
        let denied = bind_words(addr, &std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert_eq!(
            denied,
            "cannot listen on ops.listen (127.0.0.1:9464): permission denied"
        );
    }
}
