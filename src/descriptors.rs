//! The process's descriptor budget: raising the soft `RLIMIT_NOFILE` at the start of
//! `tunnelgate run`, and recognising the errors that say a local resource ran out
//! (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`), so that such a failure is named as the
//! gateway's own and never blamed on a peer; and a small reserve of descriptors, held
//! from the start of `run` and released just before the latch file is written, so that
//! a strict gateway out of descriptors still persists its latch.
//!
//! Imports nothing of the crate: `downstream`, `control` and `ops` classify with it,
//! `strict` releases the reserve. The limit is raised and the reserve held only by the
//! binary's run path ([`prepare_for_run`]), never by an embedder's
//! [`Gateway::run`](crate::Gateway::run): a library does not change its host's limits.

use std::sync::Mutex;

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors held in reserve: the latch file's write needs two at once (the temporary
/// file and its directory), with room for one more attempt.
const RESERVE: usize = 4;

/// The reserve (`/dev/null` opened [`RESERVE`] times); empty once released, or when
/// [`prepare_for_run`] was never called.
static RESERVED: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());

/// The start of `tunnelgate run`: raises the soft `RLIMIT_NOFILE` to the hard limit (and
/// logs both), then holds the reserve. Called once.
pub fn prepare_for_run() {
    raise_nofile_and_log();
    let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
    while reserved.len() < RESERVE {
        match std::fs::File::open("/dev/null") {
            Ok(f) => reserved.push(f),
            Err(e) => {
                tracing::warn!(error = %e, held = reserved.len(), "cannot hold the descriptor reserve for the latch file");
                break;
            }
        }
    }
}

/// Frees the reserve, so that what follows (the latch file's write) finds descriptors
/// even when the process ran out of them. Called just before the latch file is written;
/// idempotent, and a no-op when nothing was reserved.
pub(crate) fn release_reserve() {
    RESERVED.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// The words every failure of this kind carries, in logs, errors and caller messages.
pub const EXHAUSTION_WORDS: &str = "too many open files in the gateway";

/// The descriptor limits around the raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NofileLimits {
    /// The soft limit the process started with.
    pub inherited_soft: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (unchanged: raising it needs privileges the gateway should not have).
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs both (one `info` line; a
/// `warn` line naming the limits when the raise was refused).
fn raise_nofile_and_log() {
    match raise_nofile() {
        Ok(l) => tracing::info!(
            inherited_soft = l.inherited_soft,
            soft = l.soft,
            hard = l.hard,
            "descriptor limit (RLIMIT_NOFILE): soft raised to the hard limit"
        ),
        Err((e, limits)) => tracing::warn!(
            error = %e,
            soft = limits.map(|l| l.soft),
            hard = limits.map(|l| l.hard),
            "descriptor limit (RLIMIT_NOFILE) could not be raised; the gateway runs with the soft limit it inherited"
        ),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. On failure, the error and the
/// limits as they stand (when they could be read).
pub(crate) fn raise_nofile() -> Result<NofileLimits, (nix::Error, Option<NofileLimits>)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| (e, None))?;
    let unchanged = NofileLimits {
        inherited_soft: soft,
        soft,
        hard,
    };
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| (e, Some(unchanged)))?;
    }
    Ok(NofileLimits {
        soft: hard,
        ..unchanged
    })
}

/// Whether this I/O error says the gateway ran out of a local resource: descriptors of
/// the process (`EMFILE`) or of the system (`ENFILE`), or kernel memory for a socket
/// (`ENOMEM`, `ENOBUFS`). std gives `EMFILE` and `ENFILE` no `ErrorKind` of their own
/// (they are `Uncategorized`), so the raw errno is read.
pub(crate) fn is_exhaustion(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::OutOfMemory
        || matches!(
            error.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
        )
}

/// Whether any of these I/O errors says so: the `io::Error`s of a cause chain, as a send
/// error gives them (`SendError::io_errors`, also inside wrapped ones).
pub(crate) fn any_is_exhaustion<'a>(errors: impl IntoIterator<Item = &'a std::io::Error>) -> bool {
    errors.into_iter().any(is_exhaustion)
}

#[cfg(test)]
pub(crate) mod exhausted;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::error::io_errors;

    #[test]
    fn each_exhaustion_errno_is_recognised_and_nothing_else() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOBUFS] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(is_exhaustion(&e), "{e}");
            let wrapped = std::io::Error::other(e);
            assert!(any_is_exhaustion(io_errors(&wrapped)), "wrapped {errno}");
        }
        for errno in [libc::ECONNREFUSED, libc::ECONNRESET, libc::ETIMEDOUT, libc::EACCES] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(!is_exhaustion(&e), "{e}");
            let wrapped = std::io::Error::other(e);
            assert!(!any_is_exhaustion(io_errors(&wrapped)), "wrapped {errno}");
        }
    }

    #[test]
    fn the_reserve_is_held_by_the_run_path_and_released_once() {
        let held = || RESERVED.lock().unwrap().len();
        release_reserve();
        assert_eq!(held(), 0, "nothing is reserved before the run path asks");
        prepare_for_run();
        assert_eq!(held(), RESERVE);
        release_reserve();
        assert_eq!(held(), 0);
        release_reserve();
        assert_eq!(held(), 0, "a second release is a no-op");
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_the_hard_one() {
        // In this test's own process: a raise to the hard limit harms no other test.
        let limits = raise_nofile().map_err(|(e, _)| e).unwrap();
        assert_eq!(limits.soft, limits.hard);
        assert!(limits.inherited_soft <= limits.hard);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (limits.hard, limits.hard));
    }
}
