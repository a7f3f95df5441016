//! A real etcd for the client's tests (Debian's `etcd-server`, installed by
//! `scripts/install-peers`), as `tests/it/etcd_peer.rs` starts one for the integration
//! tests: one member on loopback, free ports, a temporary data dir, killed with its
//! process group on drop; over plain HTTP, or over TLS that requires a client
//! certificate of the test's private CA ([`Pki`], the `openssl` CLI).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::coord::etcd::Etcd;

/// How long etcd may take to elect itself and answer `/health`.
const READY: Duration = Duration::from_secs(30);

/// Polls `probe` until it yields a value and returns it; panics naming `what` after
/// `timeout`.
pub(super) async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `condition` until it is true; panics naming `what` after `timeout`.
pub(super) async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(what, timeout, || {
        let fut = condition();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// Waits until `etcd` answers `status` (after a resume or a restart).
pub(super) async fn wait_serving(etcd: &Etcd) {
    wait_until("etcd answering again", READY, || async { etcd.status().await.is_ok() }).await;
}

/// A port that was free on 127.0.0.1 a moment ago, for a process the test starts to bind:
/// drawn below the kernel's ephemeral range, where an outgoing connection of a test
/// running beside this one cannot take it between the draw and etcd's bind.
pub(super) fn free_port() -> u16 {
    use rand::Rng;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let ceiling = low.min(32_768);
    let floor = ceiling.saturating_sub(12_000).max(1_024);
    let mut rng = rand::rng();
    for _ in 0..64 {
        let port = rng.random_range(floor..ceiling);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("a bound socket has an address").port()
}

/// etcd as a child process in its own process group, its stderr captured; dropping it
/// kills the group and reaps the child.
struct Process {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Process {
    fn spawn(mut cmd: Command) -> Process {
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .expect("run etcd (Debian's etcd-server: scripts/install-peers)");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock().expect("capture lock").extend_from_slice(&buf[..n]);
            }
        });
        Process { child, stderr }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits i32"))
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("capture lock")).into_owned()
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal etcd");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = killpg(self.pid(), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- etcd stderr ----\n{}", self.stderr());
        }
    }
}

pub(super) struct EtcdPeer {
    process: Option<Process>,
    client_port: u16,
    peer_port: u16,
    /// `(CA certificate, server pair)` when the client URL is https.
    tls: Option<(PathBuf, Pair)>,
    dir: tempfile::TempDir,
}

impl EtcdPeer {
    /// Starts etcd and waits until it is healthy (a new pair of ports if it lost a race
    /// for them).
    pub(super) async fn start() -> EtcdPeer {
        EtcdPeer::start_with(None).await
    }

    /// Starts etcd serving clients over TLS with `server`, requiring a client certificate
    /// issued by `ca`.
    pub(super) async fn start_tls(ca: &Pair, server: &Pair) -> EtcdPeer {
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
            let stderr = peer.process.as_ref().map(Process::stderr).unwrap_or_default();
            eprintln!("etcd did not start (ports taken?); trying others:\n{stderr}");
            let EtcdPeer { dir: kept, .. } = peer;
            dir = kept;
            // A member half bootstrapped with the old peer URL would not start on new ports.
            let _ = std::fs::remove_dir_all(dir.path().join("data"));
        }
        panic!("etcd did not start on three pairs of free ports");
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS), the client URL.
    pub(super) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// `kill -9` (the data dir stays, for [`EtcdPeer::restart`]).
    pub(super) fn kill(&mut self) {
        self.process = None;
    }

    /// SIGSTOP: etcd keeps its sockets (connections are accepted by the kernel) and
    /// answers nothing. Returns once every thread of etcd is stopped: a SIGSTOP takes
    /// effect on each thread when it next enters the kernel, and a thread still running
    /// could answer a request sent right after the signal (seen on a loaded machine).
    pub(super) async fn pause(&self) {
        let process = self.process.as_ref().expect("etcd runs");
        process.signal(Signal::SIGSTOP);
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
        wait_until(
            "every thread of etcd stopped by SIGSTOP",
            Duration::from_secs(5),
            || async { stopped() },
        )
        .await;
    }

    /// SIGCONT after [`EtcdPeer::pause`].
    pub(super) fn resume(&self) {
        self.process.as_ref().expect("etcd runs").signal(Signal::SIGCONT);
    }

    /// Kills etcd and starts it again on the same data dir and ports.
    pub(super) async fn restart(&mut self) {
        self.kill();
        assert!(self.launch().await, "etcd did not start again on its own ports");
    }

    /// Turns authentication on: `user` with `password` and the root role (and `root`
    /// with the same password, which etcd needs first).
    pub(super) async fn enable_auth(&self, user: &str, password: &str) {
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

    async fn etcdctl(&self, args: &[&str]) {
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
            cmd.arg("--log-level=warn");
        }
        let mut process = Process::spawn(cmd);
        let healthy = tokio::time::timeout(READY, healthy(&mut process, &client, self.tls.is_some())).await;
        let Ok(healthy) = healthy else {
            panic!("etcd not healthy within {READY:?}:\n{}", process.stderr());
        };
        self.process = Some(process);
        healthy
    }
}

/// Waits until etcd is healthy: `true`, or `false` when it exited first. Over TLS, where
/// `/health` wants a client certificate, etcd's own log line says that it serves.
async fn healthy(process: &mut Process, client: &str, tls: bool) -> bool {
    let health = format!("{client}/health");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("build reqwest client");
    while !process.exited() {
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

/// A folder of PEM files: CAs, server certificates for 127.0.0.1, client certificates,
/// made with the `openssl` CLI.
pub(super) struct Pki {
    dir: tempfile::TempDir,
}

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub(super) struct Pair {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl CLI runs (scripts/install-peers)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub(super) fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A self-signed CA `NAME.pem` / `NAME.key` (common name `NAME`).
    pub(super) fn ca(&self, name: &str) -> Pair {
        let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
        let subject = format!("/CN={name}");
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "30",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pair {
            cert: self.path(&cert),
            key: self.path(&key),
        }
    }

    /// A leaf `NAME` issued by `ca`: a server certificate for 127.0.0.1 and localhost when
    /// `server`, else a client certificate.
    pub(super) fn leaf(&self, ca: &Pair, name: &str, server: bool) -> Pair {
        let usage = if server {
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        } else {
            "extendedKeyUsage=clientAuth\n"
        };
        self.leaf_with(ca, name, usage)
    }

    /// A server certificate for 127.0.0.1 that is also a client certificate, as etcd
    /// needs with `--client-cert-auth` (its JSON gateway presents it to etcd's own gRPC).
    pub(super) fn server_and_client(&self, ca: &Pair, name: &str) -> Pair {
        let usage = "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
        self.leaf_with(ca, name, usage)
    }

    fn leaf_with(&self, ca: &Pair, name: &str, usage: &str) -> Pair {
        let (cert, key, csr, ext) = (
            format!("{name}.pem"),
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
        );
        std::fs::write(self.path(&ext), format!("basicConstraints=CA:FALSE\n{usage}")).expect("write the extensions");
        let subject = format!("/CN={name}");
        openssl(
            self.dir.path(),
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &subject,
            ],
        );
        let (ca_cert, ca_key) = (ca.cert.display().to_string(), ca.key.display().to_string());
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "30",
                "-extfile",
                &ext,
            ],
        );
        Pair {
            cert: self.path(&cert),
            key: self.path(&key),
        }
    }
}
