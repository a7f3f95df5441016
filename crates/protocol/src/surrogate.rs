//! Escaped lone surrogates: `\uD800`-`\uDFFF` escapes in JSON text that do not form a
//! high-low pair. JSON allows them, Unicode text does not, and the control plane refuses
//! a response POST that carries one (`400 invalid_json_payload`, final). The gateway
//! finds them before posting, so that the caller is told in words rather than left
//! without an answer (pure).

/// Whether the JSON text `json` holds an escaped surrogate that is not part of a valid
/// pair (a high one not followed at once by an escaped low one, or a low one alone). An
/// escaped backslash (`\\u...`) is text, not an escape.
pub fn has_lone_surrogate(json: &[u8]) -> bool {
    // Most bodies carry no `\u` escape at all.
    if !json.windows(2).any(|w| w == b"\\u") {
        return false;
    }
    let mut i = 0;
    let mut pending_high = false;
    while i < json.len() {
        if json[i] != b'\\' {
            if pending_high {
                return true;
            }
            i += 1;
            continue;
        }
        match json.get(i + 1) {
            Some(b'u') => {
                let unit = json.get(i + 2..i + 6).and_then(hex4);
                match unit {
                    Some(0xD800..=0xDBFF) if pending_high => return true,
                    Some(0xD800..=0xDBFF) => pending_high = true,
                    Some(0xDC00..=0xDFFF) if pending_high => pending_high = false,
                    Some(0xDC00..=0xDFFF) => return true,
                    _ if pending_high => return true,
                    _ => {}
                }
                i += 6;
            }
            // Any other escape (`\\`, `\"`, `\n`, ...) is two bytes of text.
            _ => {
                if pending_high {
                    return true;
                }
                i += 2;
            }
        }
    }
    pending_high
}

fn hex4(digits: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(digits).ok()?;
    u16::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_are_found_and_pairs_and_other_text_pass() {
        for lone in [
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\uDBFFx"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"\ud800":1}"#,
            r#"{"a":"\ud800\ud800\udc00"}"#,
            r#"{"a":"\ud83d\n"}"#,
            r#"{"a":"x\ud83d"#,
        ] {
            assert!(has_lone_surrogate(lone.as_bytes()), "{lone}");
        }
        for fine in [
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\u00e9 é 😀"}"#,
            r#"{"a":"\\ud800"}"#,
            r#"{"a":"\\\\\ud83d\ude00"}"#,
            r#"{"a":1}"#,
        ] {
            assert!(!has_lone_surrogate(fine.as_bytes()), "{fine}");
        }
    }
}
