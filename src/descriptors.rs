//! The process's descriptor budget: raising the soft `RLIMIT_NOFILE` at the start of
//! `tunnelgate run`, and recognising the errors that say a local resource ran out
//! (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`), so that such a failure is named as the
//! gateway's own and never blamed on a peer.
//!
//! Imports nothing of the crate: `downstream` and `control` both classify with it. The
//! limit is raised only by the binary's run path, never by an embedder's
//! [`Gateway::run`](crate::Gateway::run): a library does not change its host's limits.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The words every failure of this kind carries, in logs, errors and caller messages.
pub const EXHAUSTION_WORDS: &str = "too many open files in the gateway";

/// The descriptor limits around the raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NofileLimits {
    /// The soft limit the process started with.
    pub inherited_soft: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (unchanged: raising it needs privileges the gateway should not have).
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs both (one `info` line; a
/// `warn` line naming the limits when the raise was refused). Called once, at the start
/// of `tunnelgate run`.
pub fn raise_nofile_and_log() {
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
pub fn raise_nofile() -> Result<NofileLimits, (nix::Error, Option<NofileLimits>)> {
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
pub fn is_exhaustion(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::OutOfMemory
        || matches!(
            error.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
        )
}

/// Whether any `io::Error` in the cause chain (also inside wrapped ones) says so.
pub fn chain_is_exhaustion(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut pending: Vec<&(dyn std::error::Error + 'static)> = vec![error];
    while let Some(err) = pending.pop() {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if is_exhaustion(io) {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                pending.push(inner);
                continue;
            }
        }
        if let Some(next) = err.source() {
            pending.push(next);
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod exhausted;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exhaustion_errno_is_recognised_and_nothing_else() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOBUFS] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(is_exhaustion(&e), "{e}");
            assert!(chain_is_exhaustion(&std::io::Error::other(e)), "wrapped {errno}");
        }
        for errno in [libc::ECONNREFUSED, libc::ECONNRESET, libc::ETIMEDOUT, libc::EACCES] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(!is_exhaustion(&e), "{e}");
            assert!(!chain_is_exhaustion(&std::io::Error::other(e)), "wrapped {errno}");
        }
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
