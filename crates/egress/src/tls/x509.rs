//! The validity period of an X.509 certificate, read from its DER (RFC 5280, 4.1) by
//! `x509-cert`.
//!
//! Pure: no I/O, no clock. Anything that is not a DER certificate is `None`.

use std::time::SystemTime;

use x509_cert::der::Decode;
use x509_cert::time::Time;
use x509_cert::Certificate;

/// `notBefore` and `notAfter` of a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: SystemTime,
    pub(crate) not_after: SystemTime,
}

/// The validity of the certificate in `der`.
pub(crate) fn validity(der: &[u8]) -> Option<Validity> {
    let certificate = Certificate::from_der(der).ok()?;
    let validity = certificate.tbs_certificate().validity();
    Some(Validity {
        not_before: system_time(validity.not_before)?,
        not_after: system_time(validity.not_after)?,
    })
}

/// `UTCTime` (years 1970-2049) or `GeneralizedTime` (through 9999) as a `SystemTime`.
fn system_time(time: Time) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(time.to_unix_duration())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    use super::*;

    /// Self-signed (Ed25519, v3 with extensions): `notBefore` 2026-12-01T22:33:15Z as a
    /// `UTCTime`, `notAfter` 2109-01-20T22:33:15Z as a `GeneralizedTime`.
    const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIBSjCB/aADAgECAhRXAYY/UTHswW/3U8IBrh7F7jAxADAFBgMrZXAwGjEYMBYG
A1UEAwwPdHVubmVsZ2F0ZS10ZXN0MCAXDTI2MTIwMTIyMzMxNVoYDzIxMDkwMTIw
MjIzMzE1WjAaMRgwFgYDVQQDDA90dW5uZWxnYXRlLXRlc3QwKjAFBgMrZXADIQAW
B/kd7SiPAIfuPxRYlxFLJAbDFqQh5y393dthacRt3aNTMFEwHQYDVR0OBBYEFDUt
+bzhnKiE3dhTrlwl1A12h7rTMB8GA1UdIwQYMBaAFDUt+bzhnKiE3dhTrlwl1A12
h7rTMA8GA1UdEwEB/wQFMAMBAf8wBQYDK2VwA0EAZTBtEtTU/YbQjug3A6f8bscw
Boh0OLfrvuE3kYOkg6pEisVoN+to19Ar3uZcfxqp4uMKWNG6ri7/7c4K3Cy2Dw==
-----END CERTIFICATE-----
";

    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// The time that a certificate's validity holds as this tag and text.
    fn time(tag: u8, text: &[u8]) -> Option<SystemTime> {
        let mut der = vec![tag, u8::try_from(text.len()).expect("a short time")];
        der.extend_from_slice(text);
        system_time(Time::from_der(&der).ok()?)
    }

    #[test]
    fn both_time_forms_are_read() {
        assert_eq!(time(UTC_TIME, b"700101000000Z"), Some(at(0)));
        assert_eq!(time(UTC_TIME, b"491231235959Z"), Some(at(2_524_607_999)));
        assert_eq!(time(GENERALIZED_TIME, b"20240229120000Z"), Some(at(1_709_208_000)));
        assert_eq!(time(GENERALIZED_TIME, b"2024022912000Z"), None);
        assert_eq!(time(UTC_TIME, b"701301000000Z"), None);
    }

    #[test]
    fn a_certificate_has_its_validity_read_in_both_time_forms() {
        let der = CertificateDer::from_pem_slice(CERTIFICATE.as_bytes()).expect("a PEM certificate");
        let want = Validity {
            not_before: at(1_796_164_395),
            not_after: at(4_388_164_395),
        };
        assert_eq!(validity(&der), Some(want));
        assert_eq!(validity(&der[..der.len() - 1]), None, "a cut certificate");
    }

    #[test]
    fn anything_but_a_certificate_has_no_validity() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&[0x30, 0x03, 0x02, 0x01, 0x01]), None);
        assert_eq!(validity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
