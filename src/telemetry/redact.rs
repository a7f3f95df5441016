//! Redaction: what identifiers may appear in logs, spans, status and the latch file.
//!
//! Ids and method names are attacker-influenced strings; they are kept only when short
//! and made of safe characters, so they cannot inject lines or smuggle payload text.
//! Session ids are credentials of a kind: only a hash of one is ever recorded.

use sha2::{Digest, Sha256};

/// An opaque identifier (request id, channel), or `<unprintable>`.
pub fn safe_token(s: &str) -> String {
    if !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b)) {
        s.to_owned()
    } else {
        "<unprintable>".to_owned()
    }
}

/// A JSON-RPC method or tool name, or `<other>`.
pub fn safe_method(s: &str) -> String {
    if !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b)) {
        s.to_owned()
    } else {
        "<other>".to_owned()
    }
}

/// An MCP session id as spans may carry it: `sha256:` and the first 16 hex digits of its
/// SHA-256, the same for the same id (so a session's calls can be grouped) and useless to
/// resume it.
pub(crate) fn hashed_session_id(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_identifiers_are_masked() {
        assert_eq!(safe_token("req_1\nX"), "<unprintable>");
        assert_eq!(safe_token(&"a".repeat(129)), "<unprintable>");
        assert_eq!(safe_token("req_abc-1:2"), "req_abc-1:2");
        assert_eq!(safe_method("tools/call"), "tools/call");
        assert_eq!(safe_method("tools/call {\"x\":1}"), "<other>");
    }

    #[test]
    fn session_ids_are_hashed_stably_and_never_kept() {
        let id = "191c4850af6c49e08843a3f6c80e5046";
        let hashed = hashed_session_id(id);
        assert_eq!(hashed, hashed_session_id(id));
        assert_ne!(hashed, hashed_session_id("another"));
        assert!(hashed.starts_with("sha256:") && hashed.len() == 23, "{hashed}");
        assert!(!hashed.contains(id));
        // SHA-256("abc") starts ba7816bf8f01cfea.
        assert_eq!(hashed_session_id("abc"), "sha256:ba7816bf8f01cfea");
    }
}
