//! A real etcd of the test's own (Debian's `etcd-server`, installed by
//! `scripts/install-peers`, run as `etcd` from `PATH`): one member on loopback, free
//! ports, a temporary data dir, killed with its process group on drop; over plain HTTP,
//! or over TLS that requires a client certificate of the test's private CA ([`Pki`]).
//!
//! [`Pki`]: crate::Pki

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::net::{free_port, http_client};
use crate::pki::Pair;
use crate::process::ChildGuard;
use crate::wait::wait_for_every;

/// How long etcd may take to elect itself and answer `/health`.
const READY: Duration = Duration::from_secs(30);

/// One etcd member of the test's own; dropping it kills etcd and deletes its data.
pub struct EtcdPeer {
    process: Option<ChildGuard>,
    client_port: u16,
    peer_port: u16,
    /// `(CA certificate, server pair)` when the client URL is https.
    tls: Option<(PathBuf, Pair)>,
    dir: tempfile::TempDir,
}

impl EtcdPeer {
    /// Starts etcd over plain HTTP and waits until it is healthy (a new pair of ports if
    /// it lost a race for them).
    pub async fn start() -> EtcdPeer {
        EtcdPeer::start_with(None).await
    }

    /// Starts etcd serving clients over TLS with `server`, requiring a client certificate
    /// issued by `ca`.
    pub async fn start_tls(ca: &Pair, server: &Pair) -> EtcdPeer {
        EtcdPeer::start_with(Some((ca.cert.clone(), server.clone()))).await
    }

    async fn start_with(tls: Option<(PathBuf, Pair)>) -> EtcdPeer {
        let mut dir = tempfile::tempdir().expect("tempdir");
        for _ in 0..3 {
            let mut peer = EtcdPeer {
                process: None,
                client_port: free_port(),
                peer_port: free_port(),
                tls: tls.clone(),
                dir,
            };
            if peer.launch().await {
                return peer;
            }
            let stderr = peer.process.as_ref().map(ChildGuard::stderr).unwrap_or_default();
            eprintln!("etcd did not start (ports taken?); trying others:\n{stderr}");
            dir = peer.take_dir();
            // A member half bootstrapped with the old peer URL would not start on new ports.
            let _ = std::fs::remove_dir_all(dir.path().join("data"));
        }
        panic!("etcd did not start on three pairs of free ports");
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS), the client URL.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// `kill -9` (the data dir stays, for [`EtcdPeer::restart`]).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// SIGSTOP: etcd keeps its sockets (connections are accepted by the kernel) and
    /// answers nothing. Returns once every thread of etcd is stopped: a SIGSTOP takes
    /// effect on each thread when it next enters the kernel, and a thread still running
    /// could answer a request sent right after the signal (seen on a loaded machine).
    pub async fn pause(&self) {
        let process = self.process.as_ref().expect("etcd runs");
        process.signal("STOP");
        let tasks = format!("/proc/{}/task", process.pid());
        let stopped = || {
            std::fs::read_dir(&tasks).is_ok_and(|dir| {
                dir.flatten().all(|task| {
                    std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                        // The state follows the command name's closing parenthesis.
                        stat.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
                    })
                })
            })
        };
        let (within, every) = (Duration::from_secs(5), Duration::from_millis(5));
        wait_for_every("every thread of etcd stopped by SIGSTOP", within, every, || async {
            stopped().then_some(())
        })
        .await;
    }

    /// SIGCONT after [`EtcdPeer::pause`].
    pub fn resume(&self) {
        self.process.as_ref().expect("etcd runs").signal("CONT");
    }

    /// Kills etcd and starts it again on the same data dir and ports.
    pub async fn restart(&mut self) {
        self.kill();
        assert!(self.launch().await, "etcd did not start again on its own ports");
    }

    /// Turns authentication on: `user` with `password` and the root role (and `root`
    /// with the same password, which etcd needs first). Over plain HTTP only.
    pub async fn enable_auth(&self, user: &str, password: &str) {
        let pass = format!("--new-user-password={password}");
        self.etcdctl(&["user", "add", "root", &pass]).await;
        self.etcdctl(&["role", "add", "root"]).await;
        self.etcdctl(&["user", "grant-role", "root", "root"]).await;
        if user != "root" {
            self.etcdctl(&["user", "add", user, &pass]).await;
            self.etcdctl(&["user", "grant-role", user, "root"]).await;
        }
        self.etcdctl(&["auth", "enable"]).await;
    }

    /// The keys under `prefix` now, in etcd's order, read with `etcdctl get --prefix`.
    /// Over plain HTTP only.
    pub async fn keys_under(&self, prefix: &str) -> Vec<String> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", prefix]).await;
        out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }

    /// `etcdctl ARGS...` against this peer (Debian's `etcd-client`); its stdout.
    async fn etcdctl(&self, args: &[&str]) -> String {
        assert!(
            self.tls.is_none(),
            "etcdctl runs against a plain etcd only (it has no client certificate)"
        );
        let out = tokio::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .arg("--dial-timeout=5s")
            .arg("--command-timeout=10s")
            .args(args)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(20), out)
            .await
            .expect("etcdctl finishes within 20 s")
            .expect("run etcdctl (Debian's etcd-client)");
        assert!(
            out.status.success(),
            "etcdctl {} failed: {}",
            args[0..2].join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("etcdctl prints UTF-8")
    }

    /// Spawns etcd on this peer's ports and dir; whether it became healthy.
    async fn launch(&mut self) -> bool {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new("etcd");
        cmd.arg("--name=default")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .arg("--logger=zap");
        if let Some((ca, server)) = &self.tls {
            cmd.arg(format!("--cert-file={}", server.cert.display()))
                .arg(format!("--key-file={}", server.key.display()))
                .arg(format!("--trusted-ca-file={}", ca.display()))
                .arg("--client-cert-auth");
        } else {
            // Quiet; over TLS etcd's info line that it serves is how `healthy` knows it.
            cmd.arg("--log-level=warn");
        }
        let mut process = ChildGuard::spawn("etcd", cmd);
        let healthy = tokio::time::timeout(READY, healthy(&mut process, &client, self.tls.is_some())).await;
        let Ok(healthy) = healthy else {
            panic!("etcd not healthy within {READY:?}:\n{}", process.stderr());
        };
        self.process = Some(process);
        healthy
    }

    /// The data dir, etcd killed first.
    fn take_dir(self) -> tempfile::TempDir {
        let EtcdPeer { dir, mut process, .. } = self;
        if let Some(p) = process.as_mut() {
            p.kill();
        }
        dir
    }
}

/// Waits until etcd is healthy: `true`, or `false` when it exited first. Over TLS, where
/// `/health` wants a client certificate, etcd's own log line says that it serves.
async fn healthy(process: &mut ChildGuard, client: &str, tls: bool) -> bool {
    let health = format!("{client}/health");
    let http = http_client();
    while process.try_wait().is_none() {
        let healthy = if tls {
            process.stderr().contains("serving client traffic securely")
        } else {
            match http.get(&health).send().await {
                Ok(response) => response
                    .text()
                    .await
                    .unwrap_or_default()
                    .contains("\"health\":\"true\""),
                Err(_) => false,
            }
        };
        if healthy {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
