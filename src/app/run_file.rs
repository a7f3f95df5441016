//! Files that tell other programs about a running gateway: `runtime.pid_file` (the
//! process id, written by `tunnelgate run` before its first poll) and `ops.url_file`
//! (the ops listener's base URL, written once it is bound).
//!
//! Invariants: a file is written whole or not at all (a temporary file beside it, mode
//! set, renamed over it), so a reader never sees half of one; its [`RunFile`] guard
//! removes it when dropped, which every end of a run does, the fatal ones included,
//! unless another process has replaced it meanwhile (its content is no longer ours). A
//! process killed outright (SIGKILL, a crash) leaves it, as the official client does.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A written run file, removed on drop.
#[derive(Debug)]
pub struct RunFile {
    path: PathBuf,
    contents: String,
}

/// A run file that could not be written (a configuration problem: exit 78).
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {key}: cannot write {}: {source}", path.display())]
pub struct RunFileError {
    key: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

impl RunFile {
    /// Writes `contents` to `path` (the configuration key `key`) with `mode`, atomically.
    pub(crate) fn write(key: &'static str, path: &Path, contents: String, mode: u32) -> Result<RunFile, RunFileError> {
        let failed = |source| RunFileError {
            key,
            path: path.to_owned(),
            source,
        };
        write_atomically(path, contents.as_bytes(), mode).map_err(failed)?;
        Ok(RunFile {
            path: path.to_owned(),
            contents,
        })
    }

    /// `runtime.pid_file`: this process's id and a newline, readable by all (as upstream).
    pub fn pid(path: &Path) -> Result<RunFile, RunFileError> {
        RunFile::write("runtime.pid_file", path, format!("{}\n", std::process::id()), 0o644)
    }

    /// `ops.url_file`: the listener's base URL, private to its owner (as upstream).
    pub(crate) fn url(path: &Path, listen: SocketAddr, bound: SocketAddr) -> Result<RunFile, RunFileError> {
        RunFile::write("ops.url_file", path, base_url(listen, bound), 0o600)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunFile {
    fn drop(&mut self) {
        // Left alone when another process wrote its own since (a second gateway on the
        // same path): removing it would lie about that one.
        if std::fs::read_to_string(&self.path).is_ok_and(|now| now == self.contents) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `http://HOST:PORT`, no path, no newline: the configured host unless it is unspecified
/// (`0.0.0.0`, `::`), then the bound one unless it is too, then `localhost`; the bound
/// port (so `:0` gives the port the system chose).
pub(crate) fn base_url(listen: SocketAddr, bound: SocketAddr) -> String {
    let port = bound.port();
    let host = [listen.ip(), bound.ip()].into_iter().find(|ip| !ip.is_unspecified());
    match host {
        Some(ip) => format!("http://{}", SocketAddr::new(ip, port)),
        None => format!("http://localhost:{port}"),
    }
}

/// A temporary file `.NAME.RANDOM.tmp` beside `path`, with `mode`, renamed over `path`;
/// the temporary file is removed if anything fails.
fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file"))?;
    let temp = dir.join(format!(
        ".{}.{:016x}.tmp",
        name.to_string_lossy(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_url_names_the_configured_host_else_the_bound_one_else_localhost_and_the_bound_port() {
        let cases = [
            ("127.0.0.1:0", "127.0.0.1:41234", "http://127.0.0.1:41234"),
            ("127.0.0.2:9464", "127.0.0.2:9464", "http://127.0.0.2:9464"),
            ("0.0.0.0:0", "10.0.0.7:5000", "http://10.0.0.7:5000"),
            ("0.0.0.0:8080", "0.0.0.0:8080", "http://localhost:8080"),
            ("[::]:8080", "[::]:8080", "http://localhost:8080"),
            ("[::1]:0", "[::1]:7000", "http://[::1]:7000"),
        ];
        for (listen, bound, want) in cases {
            assert_eq!(base_url(addr(listen), addr(bound)), want, "{listen} bound at {bound}");
        }
    }

    #[test]
    fn a_run_file_is_written_whole_with_its_mode_and_removed_when_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("url");
        let file = RunFile::url(&path, addr("127.0.0.1:0"), addr("127.0.0.1:4000")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "http://127.0.0.1:4000");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left beside it");
        drop(file);
        assert!(!path.exists());
    }

    #[test]
    fn a_pid_file_holds_the_pid_and_a_newline_and_one_replaced_by_another_process_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.pid");
        let file = RunFile::pid(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        std::fs::write(&path, "424242\n").unwrap();
        drop(file);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "424242\n");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_key_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent").join("gw.pid");
        let error = RunFile::pid(&path).unwrap_err();
        assert!(error.to_string().contains("runtime.pid_file"), "{error}");
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
