//! The stdio guard: the tiny process each stdio child is started through, so that the
//! child and its whole process group die with the gateway, however the gateway dies
//! (SIGKILL and the OOM killer included).
//!
//! The gateway re-executes its own image (`/proc/self/exe`, the running binary even if
//! the file was replaced on disk since) as
//! `tunnelgate __stdio-guard --parent <gateway pid> --report-fd <n> -- <command...>`, the
//! leader of a new process group, with exactly the pipes, environment and working
//! directory the child gets. The guard, synchronous and without a runtime:
//! 1. blocks the signals it waits for (below), asks the kernel for [`PARENT_DEATH`] when
//!    its parent goes (`PR_SET_PDEATHSIG`), then checks `getppid()` against `--parent`:
//!    a gateway that died before the `prctl` is caught there;
//! 2. starts the command with `posix_spawnp` in its own group, with an empty signal mask
//!    and SIGPIPE at its default (as std's `Command` would start it), and without the
//!    report descriptor;
//! 3. writes one [`Report`] line on the report pipe (`started <pid>`, or `failed <errno>`
//!    when the command could not be started: the gateway turns it into the same spawn
//!    error as before, so a missing program is still `not_sent`), then puts `/dev/null`
//!    on its own stdin, stdout and stderr, so it holds none of the child's pipes;
//! 4. waits: whenever a waited signal arrives it looks again. The gateway gone (the
//!    parent is no longer `--parent`) means SIGKILL to its whole process group, itself
//!    included. The command exited means the guard ends the same way: the same exit
//!    code, or the same signal raised on itself (128 + signal when that signal cannot end
//!    it), so the gateway's exit handling and its logs stay what they were.
//!
//! Coverage: everything in the group dies with the guard's group kill: the command and
//! every descendant that stays in its process group. A descendant that moves to another
//! group or session (`setpgid`, `setsid`, a daemonising double fork) escapes any group
//! kill, with or without the guard. The guard lives as long as the command; when the
//! command exits, the guard first SIGKILLs what it left in the group (nothing would kill
//! it with the gateway once the guard is gone), then ends.
//!
//! `PR_SET_PDEATHSIG` fires when the parent *thread* ends: a gateway thread that ended
//! while the gateway lives only makes the guard look again (the parent process is
//! unchanged), and the kernel signals again on each reparenting, so the last thread's end
//! is seen. Every signal the guard blocks is treated alike (look again), so a stray
//! SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1 or SIGUSR2 sent to the guard alone does
//! nothing: the gateway signals the whole group, which reaches the command directly.
//!
//! Must print nothing on stdout (the MCP stream), never log payloads, and run before any
//! configuration or telemetry setup. Only `main` enables it ([`dispatch`]): a binary
//! that does not dispatch the guard never has itself re-executed.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::spawn::{posix_spawnp, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
use nix::sys::prctl;
use nix::sys::signal::{kill, killpg, raise, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, getpid, getppid, Pid};

/// The hidden subcommand (handled before the command line is parsed: not in `--help`).
pub(crate) const SUBCOMMAND: &str = "__stdio-guard";
/// What the kernel sends the guard when its parent goes. Not SIGTERM, which a graceful
/// stop sends to the group; not SIGKILL, which would leave the guard no time to act.
const PARENT_DEATH: Signal = Signal::SIGUSR1;
/// The guard's process name (`ps -e`, `top`; at most 15 bytes).
const NAME: &std::ffi::CStr = c"tg-stdio-guard";
/// Exit code when the command could not be started (as a shell says "not found").
const NOT_STARTED: u8 = 127;
/// Exit code of a guard started by hand, or one that cannot do its job.
const MISUSED: u8 = 2;
/// Looks at its group for leftovers of the command before the guard gives up on them.
const LEFTOVER_LOOKS: usize = 200;
/// The longest report line.
const REPORT_MAX: usize = 64;

/// Set by [`dispatch`]: this binary runs guards, so the stdio channels use them.
static DISPATCHED: AtomicBool = AtomicBool::new(false);
/// Held from making the report pipe inheritable until the gateway's copy of its write end
/// is closed: no other child spawned meanwhile inherits it.
static SPAWN: Mutex<()> = Mutex::new(());

/// The guard's one line to the gateway, written once on the report pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    /// The command runs, with this pid (in the guard's process group).
    Started(i32),
    /// The command could not be started (`posix_spawnp` said this errno).
    Failed(i32),
}

/// The guard's command line after the subcommand.
#[derive(Debug, PartialEq, Eq)]
struct GuardArgs {
    parent: Pid,
    report_fd: i32,
    command: Vec<OsString>,
}

/// How the command ended, as the guard passes it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signaled(Signal),
}

/// Called first thing by `main`: runs the guard when this process was started as one and
/// returns its exit code; otherwise records that this binary runs guards (the stdio
/// channels then start their children through it) and returns `None`.
pub fn dispatch() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() != Some(SUBCOMMAND.as_ref()) {
        DISPATCHED.store(true, Ordering::Relaxed);
        return None;
    }
    let Some(args) = GuardArgs::parse(argv) else {
        eprintln!("tunnelgate: {SUBCOMMAND} is internal to stdio channels (usage: {SUBCOMMAND} --parent PID --report-fd FD -- COMMAND...)");
        return Some(ExitCode::from(MISUSED));
    };
    Some(run(&args))
}

/// The executable stdio children are started through: this very binary when its `main`
/// dispatches the guard, else `None` (unit tests, embedders): see [`dispatch`].
pub(super) fn executable() -> Option<PathBuf> {
    DISPATCHED
        .load(Ordering::Relaxed)
        .then(|| PathBuf::from("/proc/self/exe"))
}

/// Spawns `command` through the guard `exe`; `configure` sets what the child gets (pipes,
/// environment, `process_group(0)`). Returns the guard (the group leader) and the pid of
/// the command, once the guard reported it running; a command that could not be started
/// is the spawn error it always was, and its guard is gone.
///
/// Blocks until the guard reports, as std's own spawn blocks until the `exec`: about a
/// process start more.
pub(super) fn spawn(
    exe: &Path,
    command: &[String],
    configure: impl FnOnce(&mut tokio::process::Command),
) -> std::io::Result<(tokio::process::Child, i32)> {
    // Both ends close on exec; only the write end is made inheritable, under `SPAWN`.
    let (mut reader, writer) = std::io::pipe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg0("tunnelgate")
        .arg(SUBCOMMAND)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--report-fd")
        .arg(writer.as_raw_fd().to_string())
        .arg("--")
        .args(command);
    configure(&mut cmd);
    let process = {
        let _one_at_a_time = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        fcntl(&writer, FcntlArg::F_SETFD(FdFlag::empty()))?;
        let spawned = cmd.spawn();
        drop(writer);
        spawned?
    };
    let report = read_report(&mut reader);
    match report {
        Ok(Report::Started(pid)) => Ok((process, pid)),
        Ok(Report::Failed(errno)) => Err(std::io::Error::from_raw_os_error(errno)),
        Err(e) => {
            // Whatever it did, nothing of it may stay: the guard leads its group.
            if let Some(pgid) = process.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
            Err(e)
        }
    }
}

/// Reads the guard's one line. Its end without a line: the guard died before reporting.
fn read_report(reader: &mut impl Read) -> std::io::Result<Report> {
    let mut buf = [0u8; REPORT_MAX];
    let mut len = 0;
    while !buf[..len].ends_with(b"\n") {
        if len == buf.len() {
            return Err(std::io::Error::other("the stdio guard's report is too long"));
        }
        match reader.read(&mut buf[len..]) {
            Ok(0) => {
                return Err(std::io::Error::other(
                    "the stdio guard exited before starting the command",
                ))
            }
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Report::parse(&buf[..len]).ok_or_else(|| std::io::Error::other("the stdio guard's report is malformed"))
}

impl Report {
    fn line(self) -> String {
        match self {
            Report::Started(pid) => format!("started {pid}\n"),
            Report::Failed(errno) => format!("failed {errno}\n"),
        }
    }

    fn parse(line: &[u8]) -> Option<Report> {
        let text = std::str::from_utf8(line).ok()?.strip_suffix('\n')?;
        let (word, number) = text.split_once(' ')?;
        let number: i32 = number.parse().ok()?;
        match word {
            "started" if number > 0 => Some(Report::Started(number)),
            "failed" if number > 0 => Some(Report::Failed(number)),
            _ => None,
        }
    }
}

impl GuardArgs {
    /// `--parent PID --report-fd FD -- COMMAND...`, in this order, a command required.
    fn parse(mut argv: impl Iterator<Item = OsString>) -> Option<GuardArgs> {
        // The report descriptor is never one of the child's stdio descriptors (0 to 2).
        let mut number = |flag: &str, least: i32| -> Option<i32> {
            (argv.next()? == *flag).then_some(())?;
            argv.next()?.to_str()?.parse().ok().filter(|n| *n >= least)
        };
        let parent = Pid::from_raw(number("--parent", 1)?);
        let report_fd = number("--report-fd", 3)?;
        (argv.next()? == "--").then_some(())?;
        let command: Vec<OsString> = argv.collect();
        (!command.is_empty()).then_some(GuardArgs {
            parent,
            report_fd,
            command,
        })
    }
}

/// The guard itself, from its first instruction to its end.
fn run(args: &GuardArgs) -> ExitCode {
    let waited = waited_signals();
    // Blocked before the prctl: the parent-death signal can never end the guard unseen.
    if waited.thread_block().is_err() || prctl::set_pdeathsig(PARENT_DEATH).is_err() {
        eprintln!("tunnelgate: the stdio guard cannot watch its parent");
        return ExitCode::from(MISUSED);
    }
    if getppid() != args.parent {
        // The gateway is already gone: nothing is started.
        return ExitCode::from(NOT_STARTED);
    }
    if getpgrp() != getpid() {
        // Its group kill would hit whoever started it: it must lead its own group.
        eprintln!("tunnelgate: the stdio guard must lead its own process group");
        return ExitCode::from(MISUSED);
    }
    let _ = prctl::set_name(NAME);
    let Ok(mut report) = File::options()
        .write(true)
        .open(format!("/proc/self/fd/{}", args.report_fd))
    else {
        eprintln!("tunnelgate: the stdio guard cannot open its report descriptor");
        return ExitCode::from(MISUSED);
    };
    let started = start(args);
    let line = match started {
        Ok(pid) => Report::Started(pid.as_raw()),
        Err(errno) => Report::Failed(errno as i32),
    };
    // One write of a few bytes on a pipe: atomic. A gateway gone meanwhile is seen below.
    let _ = report.write_all(line.line().as_bytes());
    drop(report);
    let Ok(program) = started else {
        return ExitCode::from(NOT_STARTED);
    };
    detach_stdio();
    let ended = watch(args.parent, program, &waited);
    kill_leftovers();
    end_like(ended)
}

/// The signals the guard blocks and waits for; each one means "look again".
fn waited_signals() -> SigSet {
    [
        PARENT_DEATH,
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ]
    .into_iter()
    .collect()
}

/// Starts the command in the guard's group, its environment the guard's own, without the
/// report descriptor, with no signal blocked and SIGPIPE at its default.
fn start(args: &GuardArgs) -> Result<Pid, Errno> {
    let c_string = |bytes: &[u8]| CString::new(bytes).map_err(|_| Errno::EINVAL);
    let argv = args
        .command
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let env = std::env::vars_os()
        .map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut actions = PosixSpawnFileActions::init()?;
    actions.add_close(args.report_fd)?;
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&SigSet::from(Signal::SIGPIPE))?;
    attr.set_flags(PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF)?;
    posix_spawnp(&argv[0], &actions, &attr, &argv, &env)
}

/// `/dev/null` on the guard's stdin, stdout and stderr: the child's pipes end with the
/// child, not with its guard.
fn detach_stdio() {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// Waits until the command ends, or kills the group when the gateway is gone. Every
/// waited signal is blocked, so one that arrives between a look and the wait stays
/// pending and ends the wait: nothing is missed.
fn watch(parent: Pid, program: Pid, waited: &SigSet) -> Ended {
    loop {
        if getppid() != parent {
            let _ = killpg(getpgrp(), Signal::SIGKILL);
            // Not reached: the guard is in its group.
            let _ = kill(program, Signal::SIGKILL);
            return Ended::Signaled(Signal::SIGKILL);
        }
        match waitpid(program, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ended::Exited(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => return Ended::Signaled(signal),
            Ok(_) | Err(Errno::EINTR) => {}
            // Not its child any more (cannot happen): nothing left to pass on.
            Err(_) => return Ended::Exited(i32::from(NOT_STARTED)),
        }
        let _ = waited.wait();
    }
}

/// Kills what the command left in the guard's group (the guard itself excepted), looking
/// again until a look finds nobody: once the guard has exited nothing would kill them with
/// the gateway. A process that cannot die (stuck in the kernel) stops the looking after
/// [`LEFTOVER_LOOKS`]; the gateway then reports it held.
fn kill_leftovers() {
    let me = getpid();
    for _ in 0..LEFTOVER_LOOKS {
        let members = group_members(me);
        if members.is_empty() {
            return;
        }
        for pid in members {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

/// The live processes of process group `group` but the caller, from `/proc`.
fn group_members(group: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .map(Pid::from_raw)
        .filter(|pid| *pid != group)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat_group(&stat))
                .is_some_and(|(state, pgrp)| pgrp == group.as_raw() && !matches!(state, 'Z' | 'X' | 'x'))
        })
        .collect()
}

/// `(state, pgrp)` of a `/proc/PID/stat` line (the name in parentheses may hold anything:
/// the fields are read after its last `)`).
fn stat_group(stat: &str) -> Option<(char, i32)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Ends the guard as the command ended. A signal is raised on the guard itself, unblocked
/// and without a core dump (the command's own core, if any, is its own). Raised twice:
/// std's SIGSEGV/SIGBUS handler returns once after putting the default back. A signal
/// that cannot end the guard (one it inherited as ignored) gives `128 + signal`.
fn end_like(ended: Ended) -> ExitCode {
    match ended {
        Ended::Exited(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        Ended::Signaled(signal) => {
            let _ = prctl::set_dumpable(false);
            for _ in 0..2 {
                let _ = raise(signal);
                let _ = SigSet::from(signal).thread_unblock();
            }
            ExitCode::from(128u8.saturating_add(u8::try_from(signal as i32).unwrap_or(0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> impl Iterator<Item = OsString> {
        args.iter().map(OsString::from).collect::<Vec<_>>().into_iter()
    }

    #[test]
    fn the_guard_command_line_is_parsed_exactly() {
        assert_eq!(
            GuardArgs::parse(os(&[
                "--parent",
                "42",
                "--report-fd",
                "7",
                "--",
                "python3",
                "-u",
                "s.py"
            ])),
            Some(GuardArgs {
                parent: Pid::from_raw(42),
                report_fd: 7,
                command: vec!["python3".into(), "-u".into(), "s.py".into()],
            })
        );
        for bad in [
            &[][..],
            &["--parent", "42", "--report-fd", "7", "--"],
            &["--parent", "42", "--report-fd", "7", "python3"],
            &["--report-fd", "7", "--parent", "42", "--", "x"],
            &["--parent", "0", "--report-fd", "7", "--", "x"],
            &["--parent", "-1", "--report-fd", "7", "--", "x"],
            &["--parent", "x", "--report-fd", "7", "--", "x"],
            &["--parent", "42", "--report-fd", "-3", "--", "x"],
            &["--parent", "42", "--report-fd", "1", "--", "x"],
            &["--parent", "42"],
        ] {
            assert_eq!(GuardArgs::parse(os(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn a_report_reads_back_as_written_and_nothing_else_parses() {
        for report in [Report::Started(4242), Report::Failed(2)] {
            assert_eq!(Report::parse(report.line().as_bytes()), Some(report));
        }
        for bad in [
            &b"started 12"[..],
            b"started -1\n",
            b"started 0\n",
            b"failed x\n",
            b"ok 12\n",
            b"started  12\n",
            b"\xff 1\n",
        ] {
            assert_eq!(Report::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_report_is_read_through_interruptions_and_a_silent_guard_is_an_error() {
        assert_eq!(read_report(&mut &b"started 77\n"[..]).unwrap(), Report::Started(77));
        let silent = read_report(&mut &b""[..]).unwrap_err();
        assert!(silent.to_string().contains("exited before starting"), "{silent}");
        let long = read_report(&mut &[b'x'; 100][..]).unwrap_err();
        assert!(long.to_string().contains("too long"), "{long}");
        let garbled = read_report(&mut &b"started\n"[..]).unwrap_err();
        assert!(garbled.to_string().contains("malformed"), "{garbled}");
    }

    #[test]
    fn the_group_is_read_after_the_name_whatever_the_name_holds() {
        assert_eq!(stat_group("4242 (python3) S 4240 4241 4241 0 -1"), Some(('S', 4241)));
        assert_eq!(stat_group("7 (a) b) Z 1 9 9 0"), Some(('Z', 9)));
        assert_eq!(stat_group("7 (x"), None);
        assert_eq!(stat_group("7 (x) R 1"), None);
    }

    #[test]
    fn an_exit_code_passes_through_unchanged() {
        assert_eq!(end_like(Ended::Exited(0)), ExitCode::from(0));
        assert_eq!(end_like(Ended::Exited(3)), ExitCode::from(3));
        assert_eq!(end_like(Ended::Exited(255)), ExitCode::from(255));
    }

    #[test]
    fn the_guard_waits_for_the_parent_death_signal_and_the_group_signals() {
        let waited = waited_signals();
        for signal in [PARENT_DEATH, Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGHUP] {
            assert!(waited.contains(signal), "{signal:?}");
        }
        assert!(!waited.contains(Signal::SIGKILL));
        assert_ne!(
            PARENT_DEATH,
            Signal::SIGTERM,
            "a graceful stop sends SIGTERM to the group"
        );
    }

    #[test]
    fn without_dispatch_no_guard_is_used() {
        // The test binary's `main` is the test harness: it never dispatches the guard.
        assert_eq!(executable(), None);
    }
}
