//! A real etcd of the test's own (Debian's `etcd-server`, installed by
//! `scripts/install-peers`): one member on loopback, free ports, a temporary data dir,
//! killed with its process group on drop, over plain HTTP. (The etcd client's own tests,
//! TLS included, start theirs as unit tests: `src/coord/etcd/tests/peer.rs`.)

use std::time::Duration;

use tokio::process::Command as AsyncCommand;

use crate::harness::{free_port, http_client, ChildGuard};

/// How long etcd may take to elect itself and answer `/health`.
const READY: Duration = Duration::from_secs(30);

pub(crate) struct EtcdPeer {
    process: Option<ChildGuard>,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

impl EtcdPeer {
    /// Starts etcd and waits until it is healthy (a new pair of ports if it lost a race
    /// for them).
    pub(crate) async fn start() -> EtcdPeer {
        let mut dir = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            let mut peer = EtcdPeer {
                process: None,
                client_port: free_port(),
                peer_port: free_port(),
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

    /// `http://127.0.0.1:PORT`, the client URL.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// `kill -9` (the data dir stays, for [`EtcdPeer::restart`]).
    pub(crate) fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// SIGSTOP: etcd keeps its sockets (connections are accepted by the kernel) and
    /// answers nothing. Returns once every thread of etcd is stopped: a SIGSTOP takes effect on each
    /// thread when it next enters the kernel, and a thread still running could answer a
    /// request sent right after the signal (seen on a loaded machine).
    pub(crate) async fn pause(&self) {
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !stopped() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd did not stop within 5 s of SIGSTOP"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// SIGCONT after [`EtcdPeer::pause`].
    pub(crate) fn resume(&self) {
        self.process.as_ref().expect("etcd runs").signal("CONT");
    }

    /// Kills etcd and starts it again on the same data dir and ports.
    pub(crate) async fn restart(&mut self) {
        self.kill();
        assert!(self.launch().await, "etcd did not start again on its own ports");
    }

    /// Turns authentication on: `user` with `password` and the root role (and `root`
    /// with the same password, which etcd needs first).
    pub(crate) async fn enable_auth(&self, user: &str, password: &str) {
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
    pub(crate) async fn keys_under(&self, prefix: &str) -> Vec<String> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", prefix]).await;
        out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }

    /// `etcdctl ARGS...` against this peer; its stdout.
    async fn etcdctl(&self, args: &[&str]) -> String {
        let out = AsyncCommand::new("etcdctl")
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
        let mut cmd = std::process::Command::new("etcd");
        cmd.arg("--name=default")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=warn");
        let mut process = ChildGuard::spawn("etcd", cmd);
        let healthy = tokio::time::timeout(READY, healthy(&mut process, &client)).await;
        let Ok(healthy) = healthy else {
            panic!("etcd not healthy within {READY:?}:\n{}", process.stderr());
        };
        self.process = Some(process);
        healthy
    }

    fn take_dir(self) -> tempfile::TempDir {
        let EtcdPeer { dir, mut process, .. } = self;
        if let Some(p) = process.as_mut() {
            p.kill();
        }
        dir
    }
}

/// Waits until etcd is healthy: `true`, or `false` when it exited first.
async fn healthy(process: &mut ChildGuard, client: &str) -> bool {
    let health = format!("{client}/health");
    let http = http_client();
    while process.try_wait().is_none() {
        let healthy = match http.get(&health).send().await {
            Ok(response) => response
                .text()
                .await
                .unwrap_or_default()
                .contains("\"health\":\"true\""),
            Err(_) => false,
        };
        if healthy {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
