//! The roots and the client identity of one scope, re-read by the next handshake when
//! their files change.
//!
//! A handshake compares each file's stamp (device, inode, size, modification time) with
//! the one last loaded: one `stat` per file and handshake, pooled connections make no
//! handshake. A changed set is loaded whole before it replaces the last good one; a set
//! that does not load is warned about once per stamp and retried when a file changes
//! again. Short critical sections on a `std::sync::Mutex`, never held across `.await`
//! (rustls calls these synchronously).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::files::{self, stamp, Stamp};
use super::{ClientIdentity, TlsFile};
use super::{TlsError, TlsProblem};

/// The server certificate verifier of a scope: platform roots plus `ca_file`, or
/// `ca_file` alone (`ca_only`).
pub(super) struct RootsWatch {
    ca: Option<TlsFile>,
    ca_only: bool,
    provider: Arc<CryptoProvider>,
    current: Mutex<Roots>,
}

struct Roots {
    stamp: Stamp,
    /// The stamp of the last set that failed to load (warned about once).
    failed: Option<Stamp>,
    verifier: Arc<dyn ServerCertVerifier>,
    /// The certificates of `ca_file`, byte for byte: a server presenting exactly one of
    /// them is accepted even where a chain cannot be built (a self-signed certificate
    /// marked `CA:TRUE`, which the official client's Go TLS accepts).
    pinned: Vec<CertificateDer<'static>>,
}

/// The client certificate resolver of a scope.
pub(super) struct IdentityWatch {
    identity: ClientIdentity,
    provider: Arc<CryptoProvider>,
    current: Mutex<Identity>,
}

struct Identity {
    stamps: (Stamp, Stamp),
    failed: Option<(Stamp, Stamp)>,
    key: Arc<CertifiedKey>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while loading leaves the last good set in place: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RootsWatch {
    pub(super) fn load(
        ca: Option<TlsFile>,
        ca_only: bool,
        provider: Arc<CryptoProvider>,
        now: SystemTime,
    ) -> Result<Self, TlsError> {
        let stamp = ca.as_ref().and_then(stamp);
        let (verifier, pinned) = build_verifier(ca.as_ref(), ca_only, &provider, now)?;
        Ok(Self {
            ca,
            ca_only,
            provider,
            current: Mutex::new(Roots {
                stamp,
                failed: None,
                verifier,
                pinned,
            }),
        })
    }

    /// The verifier for a new handshake and the pinned certificates: reloaded first if
    /// `ca_file` changed.
    fn current(&self) -> (Arc<dyn ServerCertVerifier>, Vec<CertificateDer<'static>>) {
        let mut roots = lock(&self.current);
        if let Some(ca) = &self.ca {
            let now = stamp(ca);
            if now != roots.stamp && Some(now) != roots.failed {
                match build_verifier(Some(ca), self.ca_only, &self.provider, SystemTime::now()) {
                    Ok((verifier, pinned)) => {
                        roots.verifier = verifier;
                        roots.pinned = pinned;
                        roots.stamp = now;
                        roots.failed = None;
                        tracing::info!(key = %ca.key, "CA file changed; new connections trust the new file");
                    }
                    Err(e) => {
                        roots.failed = Some(now);
                        tracing::warn!(key = %e.key, problem = %e.problem, kind = e.kind(), "CA file changed but cannot be used; the previous one stays in use");
                    }
                }
            }
        }
        (roots.verifier.clone(), roots.pinned.clone())
    }
}

type Built = (Arc<dyn ServerCertVerifier>, Vec<CertificateDer<'static>>);

fn build_verifier(
    ca: Option<&TlsFile>,
    ca_only: bool,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
) -> Result<Built, TlsError> {
    let extra = match ca {
        Some(ca) => Some((ca, files::roots(ca, now)?.0)),
        None => None,
    };
    let pinned = extra.as_ref().map(|(_, certs)| certs.clone()).unwrap_or_default();
    Ok((chain_verifier(extra, ca_only, provider)?, pinned))
}

fn chain_verifier(
    extra: Option<(&TlsFile, Vec<CertificateDer<'static>>)>,
    ca_only: bool,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, TlsError> {
    let bad = |ca: Option<&TlsFile>, reason: String| TlsError {
        key: ca.map_or_else(|| "tls".to_owned(), |c| c.key.clone()),
        problem: TlsProblem::BadRoots {
            path: ca.map_or_else(|| "the platform store".to_owned(), |c| c.path.display().to_string()),
            reason,
        },
    };
    match extra {
        Some((ca, certs)) if ca_only => {
            let mut store = rustls::RootCertStore::empty();
            for cert in certs {
                store.add(cert).map_err(|e| bad(Some(ca), e.to_string()))?;
            }
            let verifier =
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| bad(Some(ca), e.to_string()))?;
            Ok(verifier)
        }
        Some((ca, certs)) => {
            let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(certs, provider.clone())
                .map_err(|e| bad(Some(ca), e.to_string()))?;
            Ok(Arc::new(verifier))
        }
        None => {
            let verifier =
                rustls_platform_verifier::Verifier::new(provider.clone()).map_err(|e| bad(None, e.to_string()))?;
            Ok(Arc::new(verifier))
        }
    }
}

/// A pinned certificate is still checked for everything but its chain: it is within
/// its validity period and names the server; the refusal says which, as the chain
/// check's would.
fn pinned_is_usable(
    end_entity: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    use rustls::CertificateError;
    let bad = |e: CertificateError| Err(rustls::Error::InvalidCertificate(e));
    let Some(validity) = super::x509::validity(end_entity) else {
        return bad(CertificateError::BadEncoding);
    };
    let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(now.as_secs());
    if at < validity.not_before {
        return bad(CertificateError::NotValidYet);
    }
    if at > validity.not_after {
        return bad(CertificateError::Expired);
    }
    match webpki::EndEntityCert::try_from(end_entity) {
        Ok(cert) if cert.verify_is_valid_for_subject_name(server_name).is_ok() => Ok(()),
        Ok(_) => bad(CertificateError::NotValidForName),
        Err(_) => bad(CertificateError::BadEncoding),
    }
}

impl std::fmt::Debug for RootsWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootsWatch")
            .field("ca_file", &self.ca.as_ref().map(|c| &c.key))
            .field("ca_only", &self.ca_only)
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for RootsWatch {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let (verifier, pinned) = self.current();
        // A pinned certificate is judged here, before the chain check: the chain check
        // would refuse one marked `CA:TRUE` (and its platform verifier logs each refusal
        // as an error), while the operator trusted exactly these bytes.
        if pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
            return pinned_is_usable(end_entity, server_name, now).map(|()| ServerCertVerified::assertion());
        }
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        lock(&self.current)
            .verifier
            .clone()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        lock(&self.current)
            .verifier
            .clone()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        lock(&self.current).verifier.supported_verify_schemes()
    }
}

impl IdentityWatch {
    pub(super) fn load(
        identity: ClientIdentity,
        provider: Arc<CryptoProvider>,
        now: SystemTime,
    ) -> Result<Self, TlsError> {
        let stamps = (stamp(&identity.cert), stamp(&identity.key));
        let key = files::identity(&identity, &provider, now)?;
        Ok(Self {
            identity,
            provider,
            current: Mutex::new(Identity {
                stamps,
                failed: None,
                key,
            }),
        })
    }

    /// The identity for a new handshake: reloaded first if either file changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut held = lock(&self.current);
        let now = (stamp(&self.identity.cert), stamp(&self.identity.key));
        if now != held.stamps && Some(now) != held.failed {
            match files::identity(&self.identity, &self.provider, SystemTime::now()) {
                Ok(key) => {
                    held.key = key;
                    held.stamps = now;
                    held.failed = None;
                    tracing::info!(
                        key = %self.identity.cert.key,
                        "client certificate changed; new connections present the new one"
                    );
                }
                Err(e) => {
                    held.failed = Some(now);
                    tracing::warn!(key = %e.key, problem = %e.problem, kind = e.kind(), "client certificate files changed but cannot be used; the previous certificate stays in use");
                }
            }
        }
        held.key.clone()
    }
}

impl std::fmt::Debug for IdentityWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key: only which keys name the files.
        f.debug_struct("IdentityWatch")
            .field("client_cert", &self.identity.cert.key)
            .field("client_key", &self.identity.key.key)
            .finish_non_exhaustive()
    }
}

impl ResolvesClientCert for IdentityWatch {
    fn resolve(&self, _root_hint_subjects: &[&[u8]], _sigschemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
