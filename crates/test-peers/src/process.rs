//! A child process in its own process group, its stdout and stderr captured; dropping
//! its guard kills the whole group and reaps the child (also when a test panics: the
//! captured stderr is printed then, to explain the failure).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::net::http_answers;
use crate::wait::POLL_INTERVAL;

/// Bytes a child wrote, filled by a background reader thread; `1` says the pipe ended.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>, Arc<std::sync::atomic::AtomicBool>);

impl Captured {
    fn follow(&self, mut pipe: impl Read + Send + 'static) {
        let sink = self.0.clone();
        let ended = self.1.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().expect("capture lock").extend_from_slice(&buf[..n]),
                }
            }
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }

    fn ended(&self) -> bool {
        self.1.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("capture lock")).into_owned()
    }
}

/// A spawned process in its own process group, with stdout and stderr captured.
/// Dropping it kills the whole group (`kill -KILL -- -PGID`) and reaps the child.
pub struct ChildGuard {
    name: String,
    child: Child,
    stdout: Captured,
    stderr: Captured,
    status: Option<ExitStatus>,
}

impl ChildGuard {
    /// Spawns `cmd` (stdin closed, stdout/stderr captured) as the leader of a new
    /// process group. `name` labels panics and the output dumped on failure.
    pub fn spawn(name: &str, mut cmd: Command) -> ChildGuard {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({:?}): {e}", cmd.get_program()));
        let stdout = Captured::default();
        let stderr = Captured::default();
        stdout.follow(child.stdout.take().expect("stdout is piped"));
        stderr.follow(child.stderr.take().expect("stderr is piped"));
        ChildGuard {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    /// The child's pid, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the child wrote to stdout so far (lossy UTF-8).
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// Everything the child wrote to stderr so far (lossy UTF-8).
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// The exit status if the child has exited (never blocks).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait on own child");
        }
        self.status
    }

    /// Waits up to `timeout` for the child to exit. `None`: still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                // Let the reader threads drain what the child wrote before it exited
                // (bounded: a grandchild may still hold the pipes).
                let drained_by = Instant::now() + Duration::from_secs(2);
                while !(self.stdout.ended() && self.stderr.ended()) && Instant::now() < drained_by {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Sends `signal` (a name such as `TERM`, `INT`, `KILL`) to the child only.
    pub fn signal(&self, signal: &str) {
        if self.status.is_none() {
            kill(&format!("-{signal}"), &self.pid().to_string());
        }
    }

    /// Kills the whole process group and reaps the child. Idempotent.
    pub fn kill(&mut self) {
        // The group outlives its leader when grandchildren remain: kill it regardless.
        kill("-KILL", &format!("-{}", self.pid()));
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Panics with the child's output unless it is still running.
    fn assert_running(&mut self, while_doing: &str) {
        if let Some(status) = self.try_wait() {
            panic!(
                "{} exited with {status} while {while_doing}; stderr:\n{}",
                self.name,
                tail(&self.stderr(), 4000)
            );
        }
    }

    /// Waits until `url` answers HTTP; panics early if the child exits first.
    pub async fn wait_http_ready(&mut self, url: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running(&format!("starting to serve {url}"));
            if http_answers(url).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer on {url} within {timeout:?}; stderr:\n{}",
                self.name,
                tail(&self.stderr(), 4000)
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- {} (pid {}) stderr ----\n{}",
                self.name,
                self.pid(),
                tail(&self.stderr(), 8000)
            );
        }
    }
}

/// `kill SIGNAL TARGET` through the system `kill` (target `-PGID` means a group).
fn kill(signal: &str, target: &str) {
    let _ = Command::new("kill")
        .args([signal, "--", target])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last `max` bytes of `text`, cut on a char boundary.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes_cut_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("aé b", 3), " b", "the cut moves past the middle of `é`");
    }
}
