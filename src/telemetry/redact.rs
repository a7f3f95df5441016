//! Redaction: what identifiers may appear in logs, spans, status and the latch file.
//!
//! Ids and method names are attacker-influenced strings; they are kept only when short
//! and made of safe characters, so they cannot inject lines or smuggle payload text.

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
}
