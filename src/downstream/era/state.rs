//! The `requestState` the era bridge hands a 2026-07-28 caller when a handshake-era
//! server asks for input during a held call (pure).
//!
//! A token is `base64url(claims) "." base64url(HMAC-SHA256(key, base64url(claims)))`. The
//! key is random per process, so a held call and its token die together; the claims bind
//! the token to the held call (a random id and its park sequence), the channel, the child
//! life, the method and a digest of the call's parameters, and expire. Signed is not
//! secret: a caller can read the claims, which carry no payload, only a digest.
//!
//! Verification never trusts an unverified claim for anything but the words of a
//! refusal: a token whose process epoch is not this process's is told "restarted"
//! (another replica or an earlier process of this one issued it) without being trusted.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The claims of one token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    /// Format version.
    pub(crate) v: u8,
    /// The issuing process's epoch (random per process).
    pub(crate) e: String,
    /// The held call (random 128 bits, hex).
    pub(crate) h: String,
    /// The held call's park sequence: a token is good for one continuation of one park.
    pub(crate) s: u32,
    /// The channel and the child life the call runs in.
    pub(crate) c: String,
    pub(crate) g: u64,
    /// The method and the SHA-256 (hex) of the call's canonical parameters.
    pub(crate) m: String,
    pub(crate) d: String,
    /// The input round (1 for the first ask).
    pub(crate) r: u32,
    /// Expiry, Unix milliseconds.
    pub(crate) x: u64,
}

/// Why a token is refused (`data.reason` of the refusal, and a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// Not a token of this format, or its signature does not hold.
    Tampered,
    /// Issued by another process (a restarted gateway, or another replica).
    Restarted,
    /// Past its expiry.
    Expired,
}

/// Issues and verifies tokens with this process's key.
pub(crate) struct Signer {
    key: [u8; 32],
    epoch: String,
}

const VERSION: u8 = 1;
const BLOCK: usize = 64;

impl Signer {
    /// A signer with a fresh random key and epoch.
    pub(crate) fn random() -> Self {
        Self {
            key: rand::random(),
            epoch: crate::protocol::random_hex(8),
        }
    }

    /// This process's epoch (the `e` of every token it issues).
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The token for `claims` (whose `v` and `e` are set here).
    pub(crate) fn issue(&self, mut claims: Claims) -> String {
        claims.v = VERSION;
        claims.e = self.epoch.clone();
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let mac = URL_SAFE_NO_PAD.encode(self.mac(body.as_bytes()));
        format!("{body}.{mac}")
    }

    /// The claims of a token this process issued, checked against its signature and
    /// expiry at `now_ms`.
    pub(crate) fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, Invalid> {
        let (body, mac) = token.split_once('.').ok_or(Invalid::Tampered)?;
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(Invalid::Tampered)?;
        if claims.v != VERSION {
            return Err(Invalid::Tampered);
        }
        if claims.e != self.epoch {
            return Err(Invalid::Restarted);
        }
        let given = URL_SAFE_NO_PAD.decode(mac).map_err(|_| Invalid::Tampered)?;
        if !constant_time_eq(&given, &self.mac(body.as_bytes())) {
            return Err(Invalid::Tampered);
        }
        if now_ms > claims.x {
            return Err(Invalid::Expired);
        }
        Ok(claims)
    }

    /// HMAC-SHA256 (RFC 2104) of `message` with this signer's key.
    fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut padded = [0u8; BLOCK];
        padded[..self.key.len()].copy_from_slice(&self.key);
        let inner_key = padded.map(|b| b ^ 0x36);
        let outer_key = padded.map(|b| b ^ 0x5c);
        let inner = Sha256::new().chain_update(inner_key).chain_update(message).finalize();
        Sha256::new()
            .chain_update(outer_key)
            .chain_update(inner)
            .finalize()
            .into()
    }
}

/// Equal bytes, compared without an early exit.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// SHA-256 (hex) of a call's parameters without `_meta`, `inputResponses` and
/// `requestState`, serialized with every object's keys sorted (so that a retry that
/// orders its keys differently binds the same).
pub(crate) fn params_digest(params: Option<&serde_json::Map<String, serde_json::Value>>) -> String {
    let mut bound = params.cloned().unwrap_or_default();
    for key in ["_meta", "inputResponses", "requestState"] {
        bound.remove(key);
    }
    let mut text = String::new();
    canonical(&serde_json::Value::Object(bound), &mut text);
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `value` as JSON with object keys sorted.
fn canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> Claims {
        Claims {
            v: 0,
            e: String::new(),
            h: "00ff".into(),
            s: 1,
            c: "main".into(),
            g: 2,
            m: "tools/call".into(),
            d: "ab".into(),
            r: 1,
            x: 10_000,
        }
    }

    #[test]
    fn hmac_matches_the_rfc_4231_vector_for_a_32_byte_key() {
        // The same MAC computed independently (Python: hmac.new(b"\x0b" * 32,
        // b"Hi There", hashlib.sha256).hexdigest()).
        let signer = Signer {
            key: [0x0b; 32],
            epoch: "e".into(),
        };
        let mac: String = signer.mac(b"Hi There").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(mac, "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7");
    }

    #[test]
    fn a_token_verifies_once_issued_and_carries_its_claims() {
        let signer = Signer::random();
        let token = signer.issue(claims());
        let got = signer.verify(&token, 9_999).unwrap();
        assert_eq!(got.h, "00ff");
        assert_eq!(got.e, signer.epoch());
        assert_eq!(signer.verify(&token, 10_001), Err(Invalid::Expired));
    }

    #[test]
    fn a_changed_byte_a_foreign_key_or_garbage_is_refused() {
        let signer = Signer::random();
        let token = signer.issue(claims());
        let (body, mac) = token.split_once('.').unwrap();
        let mut forged = claims();
        forged.e = signer.epoch().to_owned();
        forged.v = VERSION;
        forged.h = "1111".into();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(
            signer.verify(&format!("{forged_body}.{mac}"), 0),
            Err(Invalid::Tampered)
        );
        assert_eq!(signer.verify(&format!("{body}.AAAA"), 0), Err(Invalid::Tampered));
        for garbage in ["", "x", "a.b", "..."] {
            assert_eq!(signer.verify(garbage, 0), Err(Invalid::Tampered), "{garbage:?}");
        }
        let other = Signer::random();
        assert_eq!(other.verify(&token, 0), Err(Invalid::Restarted));
    }

    #[test]
    fn the_digest_ignores_meta_continuation_fields_and_key_order() {
        let a = json!({"name": "t", "arguments": {"x": 1, "y": [1, {"b": 2, "a": 1}]}, "_meta": {"k": 1}});
        let b = json!({"arguments": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "name": "t", "requestState": "s", "inputResponses": {}});
        let c = json!({"name": "t", "arguments": {"x": 2}});
        let digest = |v: &serde_json::Value| params_digest(v.as_object());
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
        assert_eq!(digest(&a).len(), 64);
    }
}
