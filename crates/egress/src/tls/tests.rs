use super::*;

#[test]
fn handshake_problems_are_named_in_words_an_operator_can_act_on() {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let rows: [(E, &str); 5] = [
        (
            E::AlertReceived(A::CertificateRequired),
            "requires a client certificate",
        ),
        (E::AlertReceived(A::UnknownCA), "refused the client certificate"),
        (E::AlertReceived(A::CertificateExpired), "as expired"),
        (E::InvalidCertificate(C::UnknownIssuer), "not issued by a trusted CA"),
        (E::InvalidCertificate(C::Expired), "server's certificate has expired"),
    ];
    for (error, words) in rows {
        let io = std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, error.clone()));
        let described = handshake_problem(&io).expect("a rustls error in the chain");
        assert!(described.contains(words), "{error:?}: {described}");
    }
    assert_eq!(handshake_problem(&std::io::Error::other("plain")), None);
}

#[test]
fn a_scope_without_tls_settings_keeps_the_default_client() {
    assert!(client_config(&TlsFiles::default()).unwrap().is_none());
}

#[test]
fn errors_name_the_key_and_the_file_but_never_its_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    std::fs::write(
        &path,
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let files = TlsFiles {
        ca_file: Some(crate::tls::TlsFile {
            path: path.clone(),
            key: "mcp.tls.ca_file".into(),
        }),
        ..TlsFiles::default()
    };
    let e = client_config(&files).unwrap_err();
    assert_eq!((e.key.as_str(), e.kind()), ("mcp.tls.ca_file", "not_pem"));
    let text = e.to_string();
    assert!(
        text.starts_with("mcp.tls.ca_file: ") && text.contains("ca.pem"),
        "{text}"
    );
    assert!(!text.contains("c2VjcmV0"), "{text}");
    let missing = TlsFiles {
        ca_file: Some(crate::tls::TlsFile {
            path: dir.path().join("absent.pem"),
            key: "control_plane.tls.ca_file".into(),
        }),
        ..TlsFiles::default()
    };
    let e = client_config(&missing).unwrap_err();
    assert_eq!(e.kind(), "unreadable");
    assert!(e.to_string().contains("no such file"), "{e}");
}

#[test]
fn only_the_servers_handshake_alerts_count_as_a_refused_handshake() {
    use rustls::{AlertDescription as A, Error as E};
    for alert in [
        A::CertificateRequired,
        A::UnknownCA,
        A::BadCertificate,
        A::CertificateExpired,
        A::HandshakeFailure,
    ] {
        let io = std::io::Error::other(E::AlertReceived(alert));
        assert!(refused_handshake(&io), "{alert:?}");
    }
    for error in [
        E::AlertReceived(A::CloseNotify),
        E::AlertReceived(A::InternalError),
        E::DecryptError,
    ] {
        let io = std::io::Error::other(error.clone());
        assert!(!refused_handshake(&io), "{error:?}");
    }
    assert!(!refused_handshake(&std::io::Error::from(
        std::io::ErrorKind::ConnectionReset
    )));
}
