//! Reading the TLS files: certificates, the private key, and their checks (the key
//! matches the certificate, the certificate is within its validity period).
//!
//! Every error names the file's key; file contents never appear in one.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::x509::{validity, Validity};
use super::{rfc3339, TlsError, TlsProblem};
use super::{ClientIdentity, TlsFile, TlsFiles};

/// A TLS file larger than this is refused rather than read whole.
const MAX_TLS_FILE: u64 = 4 * 1024 * 1024;

/// What changes when a file is rewritten: device, inode, size, modification time.
pub(super) type Stamp = Option<(u64, u64, u64, SystemTime)>;

/// One file's check, for `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// The dotted key that named the file.
    pub key: String,
    /// The path, as configured.
    pub path: String,
    /// When the certificate in it (the earliest of a CA file's) stops being valid;
    /// `Ok(None)` for a key file that is good.
    pub result: Result<Option<SystemTime>, TlsError>,
}

/// The file's stamp now; `None` when it cannot be read at all.
pub(super) fn stamp(file: &TlsFile) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&file.path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
}

fn error(file: &TlsFile, problem: TlsProblem) -> TlsError {
    TlsError {
        key: file.key.clone(),
        problem,
    }
}

fn shown(file: &TlsFile) -> String {
    file.path.display().to_string()
}

fn read(file: &TlsFile) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let unreadable = |reason: String| {
        error(
            file,
            TlsProblem::Unreadable {
                path: shown(file),
                reason,
            },
        )
    };
    let opened = std::fs::File::open(&file.path).map_err(|e| unreadable(io_words(&e)))?;
    let meta = opened.metadata().map_err(|e| unreadable(io_words(&e)))?;
    if !meta.is_file() {
        return Err(unreadable("it is not a regular file".into()));
    }
    let mut bytes = Vec::new();
    opened
        .take(MAX_TLS_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(io_words(&e)))?;
    if bytes.len() as u64 > MAX_TLS_FILE {
        return Err(unreadable(format!("it is larger than {MAX_TLS_FILE} bytes")));
    }
    Ok(bytes)
}

fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// Every certificate in a PEM file, in order; at least one.
pub(super) fn certificates(file: &TlsFile) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(file)?;
    let not_pem = || {
        error(
            file,
            TlsProblem::NotPem {
                path: shown(file),
                wanted: "certificates",
            },
        )
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|_| not_pem())?;
    if certs.is_empty() {
        return Err(not_pem());
    }
    Ok(certs)
}

fn private_key(file: &TlsFile) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(file)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        error(
            file,
            TlsProblem::NotPem {
                path: shown(file),
                wanted: "a private key",
            },
        )
    })
}

fn validity_of(file: &TlsFile, der: &CertificateDer<'_>) -> Result<Validity, TlsError> {
    validity(der).ok_or_else(|| error(file, TlsProblem::NoValidity { path: shown(file) }))
}

/// Whether `v` holds at `now`; the error names `file`.
fn within(file: &TlsFile, v: Validity, now: SystemTime) -> Result<(), TlsError> {
    if now > v.not_after {
        return Err(error(
            file,
            TlsProblem::Expired {
                path: shown(file),
                at: rfc3339(v.not_after),
            },
        ));
    }
    if now < v.not_before {
        return Err(error(
            file,
            TlsProblem::NotYetValid {
                path: shown(file),
                at: rfc3339(v.not_before),
            },
        ));
    }
    Ok(())
}

/// The certificate and its key, matched (the validity is not checked here).
fn pair(identity: &ClientIdentity, provider: &CryptoProvider) -> Result<(Arc<CertifiedKey>, Validity), TlsError> {
    let chain = certificates(&identity.cert)?;
    let validity = validity_of(&identity.cert, &chain[0])?;
    let key = private_key(&identity.key)?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => error(
            &identity.key,
            TlsProblem::KeyMismatch {
                cert_path: shown(&identity.cert),
            },
        ),
        other => error(
            &identity.key,
            TlsProblem::BadKey {
                path: shown(&identity.key),
                reason: other.to_string(),
            },
        ),
    })?;
    Ok((Arc::new(certified), validity))
}

/// The client identity, ready for handshakes: readable, parsed, key matching, valid now.
pub(super) fn identity(
    identity: &ClientIdentity,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let (certified, validity) = pair(identity, provider)?;
    within(&identity.cert, validity, now)?;
    Ok(certified)
}

/// The CA certificates of `ca_file`, with the earliest end of their validity. A file
/// whose every certificate has expired is an error; one expired among others is not
/// (bundles carry old roots).
pub(super) fn roots(ca: &TlsFile, now: SystemTime) -> Result<(Vec<CertificateDer<'static>>, SystemTime), TlsError> {
    let certs = certificates(ca)?;
    let mut periods = Vec::with_capacity(certs.len());
    for cert in &certs {
        periods.push(validity_of(ca, cert)?);
    }
    if let Some(latest) = periods.iter().max_by_key(|v| v.not_after) {
        if now > latest.not_after {
            within(ca, *latest, now)?;
        }
    }
    let earliest = periods
        .iter()
        .filter(|v| v.not_after >= now)
        .map(|v| v.not_after)
        .min()
        .unwrap_or(now);
    Ok((certs, earliest))
}

/// Checks every configured file of a scope, as the gateway would read it at startup.
pub fn inspect(files: &TlsFiles, now: SystemTime) -> Vec<FileReport> {
    let provider = super::provider();
    let mut out = Vec::new();
    let report = |file: &TlsFile, result| FileReport {
        key: file.key.clone(),
        path: shown(file),
        result,
    };
    if let Some(ca) = &files.ca_file {
        out.push(report(ca, roots(ca, now).map(|(_, earliest)| Some(earliest))));
    }
    if let Some(id) = &files.client {
        let paired = pair(id, &provider);
        let cert = match &paired {
            Ok((_, v)) => within(&id.cert, *v, now).map(|()| Some(v.not_after)),
            Err(e) if e.key == id.cert.key => Err(e.clone()),
            // The certificate itself is fine when only the key is not.
            Err(_) => certificates(&id.cert)
                .and_then(|chain| validity_of(&id.cert, &chain[0]))
                .and_then(|v| within(&id.cert, v, now).map(|()| Some(v.not_after))),
        };
        let key = match paired {
            Ok(_) => Ok(None),
            Err(e) if e.key == id.key.key => Err(e),
            Err(_) => private_key(&id.key).map(|_| None),
        };
        out.push(report(&id.cert, cert));
        out.push(report(&id.key, key));
    }
    out
}
