//! TLS for the gateway's HTTP clients: trusted roots and client certificates.
//!
//! Turns a scope's [`TlsFiles`] (`control_plane.tls`, one HTTP channel's effective
//! `mcp.tls`, `coordination.etcd.tls`) into a rustls client configuration for the
//! scope's client (`egress::client`), whose connections share its verifier and resolver,
//! so a rewritten file reaches the next handshake. A scope with no TLS setting gets
//! `None`: the client takes the platform's (`egress::client::platform_config`: platform
//! roots, no client certificate).
//!
//! Invariants:
//! - `ca_file` is added to the platform roots; with `ca_only` it is trusted alone;
//! - a scope with a client certificate negotiates TLS 1.2, so that a server's refusal of
//!   the certificate always ends the handshake before any request byte is written (see
//!   [`client_config`]); other scopes offer TLS 1.3 and 1.2;
//! - the client certificate belongs to the one client built with it, and so to the one
//!   origin that client is for (neither client follows redirects, nor sends TLS to a
//!   proxy), never to another;
//! - the files are read at startup (every problem is a [`TlsError`] naming the key: at
//!   startup a configuration error, exit 78), and again by a new handshake whenever a
//!   file's identity, size or modification time changed (cert-manager rewrites them in
//!   place): new connections use the new files, pooled ones keep theirs. A rewritten set
//!   that does not load (a certificate whose key is not written yet) leaves the last good
//!   one in use, with one warning naming the key, until it loads;
//! - key material is never logged, printed, nor kept beyond rustls' signing key: errors
//!   name keys and paths' roles, never contents.
//!
//! Must not send anything, and must not know commands, the fence or transports.

mod files;
mod reload;
mod x509;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use files::{inspect, FileReport};

/// One configured file: its path and the dotted key that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFile {
    pub path: PathBuf,
    /// e.g. `mcp.channels.main.tls.client_cert`, or `mcp.tls.client_cert` when inherited.
    pub key: String,
}

/// The effective TLS files of one scope (the control plane, or one HTTP channel).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of one or more CA certificates, added to the platform roots.
    pub ca_file: Option<TlsFile>,
    /// `ca_file` alone is trusted (the platform roots are not).
    pub ca_only: bool,
    /// The client certificate and its key (both or neither); chain in the cert file.
    pub client: Option<ClientIdentity>,
}

/// A client certificate (PEM, leaf first, then any intermediates) and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert: TlsFile,
    pub key: TlsFile,
}

impl TlsFiles {
    /// Whether nothing is configured: the client's default TLS applies.
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && !self.ca_only && self.client.is_none()
    }

    /// Every configured file, with its key.
    pub fn files(&self) -> Vec<&TlsFile> {
        let mut out: Vec<&TlsFile> = self.ca_file.iter().collect();
        if let Some(client) = &self.client {
            out.push(&client.cert);
            out.push(&client.key);
        }
        out
    }
}

/// How long before a certificate's end `doctor` warns.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// A TLS file that cannot be used, with the key that named it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct TlsError {
    /// The dotted key, e.g. `mcp.channels.main.tls.client_cert`.
    pub key: String,
    pub problem: TlsProblem,
}

/// What is wrong with a TLS file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsProblem {
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path} is not a PEM file holding {wanted}")]
    NotPem { path: String, wanted: &'static str },
    #[error("the private key in {path} cannot be used: {reason}")]
    BadKey { path: String, reason: String },
    #[error("the private key does not match the certificate in {cert_path}")]
    KeyMismatch { cert_path: String },
    #[error("the certificate in {path} expired at {at}")]
    Expired { path: String, at: String },
    #[error("the certificate in {path} is not valid before {at}")]
    NotYetValid { path: String, at: String },
    #[error("the certificate in {path} has no readable validity period")]
    NoValidity { path: String },
    #[error("the CA certificates in {path} cannot be trusted: {reason}")]
    BadRoots { path: String, reason: String },
}

impl TlsError {
    /// Stable label for logs and doctor's JSON.
    pub fn kind(&self) -> &'static str {
        match self.problem {
            TlsProblem::Unreadable { .. } => "unreadable",
            TlsProblem::NotPem { .. } => "not_pem",
            TlsProblem::BadKey { .. } => "bad_key",
            TlsProblem::KeyMismatch { .. } => "key_mismatch",
            TlsProblem::Expired { .. } => "expired",
            TlsProblem::NotYetValid { .. } => "not_yet_valid",
            TlsProblem::NoValidity { .. } => "no_validity",
            TlsProblem::BadRoots { .. } => "bad_roots",
        }
    }
}

/// The rustls client configuration of one scope, or `None` when the scope sets nothing.
///
/// Reads every file now (so a problem is reported at startup, with its key) and keeps
/// watching them for the handshakes to come.
pub fn client_config(files: &TlsFiles) -> Result<Option<rustls::ClientConfig>, TlsError> {
    if files.is_empty() {
        return Ok(None);
    }
    let provider = provider();
    let now = SystemTime::now();
    let verifier = reload::RootsWatch::load(files.ca_file.clone(), files.ca_only, provider.clone(), now)?;
    // With a client certificate, TLS 1.2: a TLS 1.3 server judges the certificate after
    // the client's side of the handshake is done, when the request may already be written,
    // and its refusal then often arrives as a reset that cannot be told from a failure
    // after delivery (`abandoned`, a latch in strict mode). A TLS 1.2 server refuses it
    // before its Finished, which the client waits for: `not_sent`, with the alert named.
    let versions: &[&rustls::SupportedProtocolVersion] = if files.client.is_some() {
        &[&rustls::version::TLS12]
    } else {
        rustls::DEFAULT_VERSIONS
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .expect("the aws-lc-rs provider supports TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match &files.client {
        Some(identity) => {
            let resolver = reload::IdentityWatch::load(identity.clone(), provider, now)?;
            builder.with_client_cert_resolver(Arc::new(resolver))
        }
        None => builder.with_no_client_auth(),
    };
    // `h2`, then `http/1.1`, as the platform configuration offers
    // (`egress::client::platform_config`); a caller may narrow it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // A resumed session skips the client certificate and the server's chain: a new
    // connection must make a full handshake, so that rotated files take effect on it.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Some(config))
}

/// Words for a failed TLS handshake, read from the error's cause chain: what the server
/// or the gateway refused, for the log line of a `tls` failure. `None` when the chain
/// holds neither a rustls error nor an end of the connection mid-handshake.
pub fn handshake_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(tls) = rustls_error(error) {
        return Some(describe(tls));
    }
    // tokio-rustls 0.26 reports a peer that closed mid-handshake as `UnexpectedEof`
    // ("tls handshake eof"); servers that refuse a client certificate often close
    // without an alert (Python's ssl under asyncio does).
    io_eof(error).then(|| {
        "the server closed the connection during the handshake: it most likely refused the client certificate, \
         or requires one"
            .to_owned()
    })
}

/// Whether an `io::Error` of kind `UnexpectedEof` is in the chain.
fn io_eof(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::UnexpectedEof {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                next = Some(inner as &(dyn std::error::Error + 'static));
                continue;
            }
        }
        next = e.source();
    }
    false
}

/// Whether the error's cause chain holds a TLS alert by which the server refused the
/// handshake (client authentication or negotiation), as opposed to a connection that
/// failed later. A server sends these only while handshaking, and a TLS 1.3 server does
/// not process application data before it has accepted the client's certificate, so the
/// request was not delivered even if the client had written it.
pub fn refused_handshake(error: &(dyn std::error::Error + 'static)) -> bool {
    use rustls::AlertDescription as A;
    rustls_error(error).is_some_and(|e| {
        matches!(
            e,
            rustls::Error::AlertReceived(
                A::HandshakeFailure
                    | A::BadCertificate
                    | A::UnsupportedCertificate
                    | A::CertificateRevoked
                    | A::CertificateExpired
                    | A::CertificateUnknown
                    | A::UnknownCA
                    | A::AccessDenied
                    | A::CertificateRequired
            )
        )
    })
}

/// The first rustls error in the chain, also inside (nested) wrapped `io::Error`s, whose
/// `source()` skips the error they wrap.
fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn describe(error: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match error {
        E::AlertReceived(A::CertificateRequired) => {
            "the server requires a client certificate and none was configured (set client_cert and client_key)".into()
        }
        E::AlertReceived(A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied) => {
            "the server refused the client certificate (not issued by a CA it trusts, or not accepted)".into()
        }
        E::AlertReceived(A::CertificateExpired) => "the server refused the client certificate as expired".into(),
        E::AlertReceived(A::HandshakeFailure) => {
            "the server refused the handshake (often: a client certificate it requires is missing or not accepted)"
                .into()
        }
        E::InvalidCertificate(C::UnknownIssuer) => {
            "the server's certificate is not issued by a trusted CA (set ca_file to its CA)".into()
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => "the server's certificate has expired".into(),
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate is not valid for its host name".into()
        }
        E::InvalidCertificate(C::Other(other)) if other.to_string().contains("CaUsedAsEndEntity") => {
            "the server presents a CA certificate as its own (a self-signed CA:TRUE certificate): trust it by putting exactly that certificate in ca_file".into()
        }
        other => format!("TLS error: {other}"),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A time as RFC 3339 (UTC, seconds).
fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}
