//! A private PKI made in the test with the `openssl` CLI (`scripts/install-peers`): CAs,
//! server certificates for 127.0.0.1, client certificates (valid or expired), as PEM
//! files in a temporary folder.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A folder of PEM files, deleted on drop.
pub struct Pki {
    dir: tempfile::TempDir,
}

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The extensions of a server certificate for 127.0.0.1 and localhost.
const SERVER: &str = "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
/// The extensions of a client certificate.
const CLIENT: &str = "extendedKeyUsage=clientAuth\n";
/// The extensions of a certificate that is both (etcd's with `--client-cert-auth`).
const SERVER_AND_CLIENT: &str = "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";

/// A new P-256 key, unencrypted: the key options of every `openssl req` here.
const NEW_EC_KEY: [&str; 5] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];

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
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// `NAME` in the PKI's folder (a file made here, or one for the test to write).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A self-signed CA `NAME.pem` / `NAME.key` (common name `NAME`).
    pub fn ca(&self, name: &str) -> Pair {
        let extensions = [
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ];
        self.self_signed(name, name, "30", &extensions)
    }

    /// A self-signed server certificate `NAME.pem` / `NAME.key` (common name `localhost`)
    /// marked `basicConstraints=critical,CA:TRUE`, whose SAN is `san`, valid two days:
    /// what an operator makes with one `openssl req -x509`, to pin it.
    pub fn self_signed_server(&self, name: &str, san: &str) -> Pair {
        let san = format!("subjectAltName={san}");
        let extensions = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", &san];
        self.self_signed(name, "localhost", "2", &extensions)
    }

    /// `NAME.pem` / `NAME.key`: a new key and its self-signed certificate for
    /// `/CN=common_name`, valid `days`, with `extensions` (`-addext` pairs).
    fn self_signed(&self, name: &str, common_name: &str, days: &str, extensions: &[&str]) -> Pair {
        let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
        let subject = format!("/CN={common_name}");
        let files = ["-keyout", &key, "-out", &cert, "-days", days, "-subj", &subject];
        openssl(
            self.dir.path(),
            &[&["req", "-x509"][..], &NEW_EC_KEY, &files, extensions].concat(),
        );
        Pair {
            cert: self.path(&cert),
            key: self.path(&key),
        }
    }

    /// A leaf `NAME` issued by `ca`: a server certificate for 127.0.0.1 and localhost when
    /// `server`, else a client certificate; `days` may be negative (already expired).
    pub fn leaf(&self, ca: &Pair, name: &str, server: bool, days: i32) -> Pair {
        self.leaf_with(ca, name, if server { SERVER } else { CLIENT }, days)
    }

    /// A server certificate for 127.0.0.1 that is also a client certificate, valid for 30
    /// days, as etcd needs with `--client-cert-auth` (its JSON gateway presents it to
    /// etcd's own gRPC).
    pub fn server_and_client(&self, ca: &Pair, name: &str) -> Pair {
        self.leaf_with(ca, name, SERVER_AND_CLIENT, 30)
    }

    fn leaf_with(&self, ca: &Pair, name: &str, usage: &str, days: i32) -> Pair {
        let (cert, key, csr, ext) = (
            format!("{name}.pem"),
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
        );
        std::fs::write(self.path(&ext), format!("basicConstraints=CA:FALSE\n{usage}")).expect("write the extensions");
        openssl(
            self.dir.path(),
            &[
                &["req"][..],
                &NEW_EC_KEY,
                &["-keyout", &key, "-out", &csr, "-subj", &format!("/CN={name}")],
            ]
            .concat(),
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
                &days.to_string(),
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

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}
