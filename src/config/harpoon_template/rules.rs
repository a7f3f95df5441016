//! The grammar of a Harpoon target template's parts, as upstream checks them: which
//! identifiers and values a segment or query key may hold, which regular expressions a
//! parameter's `pattern` may use, which header names a caller may send, and the form
//! encoding of a query.
//!
//! Pure.

/// Whether every byte of `s` is in the set a template identifier, a literal segment, a
/// query key or a parameter's value may use: `A-Z a-z 0-9 _ - . ~` (RFC 3986's
/// unreserved set, so nothing of it is ever percent-encoded).
pub(crate) fn is_unreserved(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~'))
}

/// A value that is a path segment of its own: unreserved, not `.` or `..`.
pub(crate) fn is_segment_value(s: &str) -> bool {
    is_unreserved(s) && s != "." && s != ".."
}

/// A parameter name: `[A-Za-z][A-Za-z0-9_]{0,63}`.
pub(crate) fn is_parameter_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphabetic()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Why a `pattern` is refused, in words, or `None`: at most 512 printable ASCII
/// characters, none of the constructs RE2 reads differently or not at all (inline flags,
/// lookarounds, `\A`, `\z`, `\p`, POSIX classes) and no escape of an unknown letter.
pub(crate) fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() || pattern.len() > 512 {
        return Some("must be 1 to 512 characters".into());
    }
    if !pattern.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Some("must be printable ASCII".into());
    }
    if pattern.contains("[[:") || pattern.contains("[^[:") {
        return Some("uses a POSIX character class ([[:name:]]); write the characters out".into());
    }
    let bytes = pattern.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                let Some(&next) = bytes.get(i + 1) else {
                    return Some("ends with a lone backslash".into());
                };
                if let Some(problem) = escape_problem(next) {
                    return Some(problem);
                }
                i += 2;
                continue;
            }
            b'(' if bytes.get(i + 1) == Some(&b'?') && bytes.get(i + 2) != Some(&b':') => {
                return Some(
                    "uses an inline flag, a lookaround or a named group `(?...)`; only `(?:...)` is allowed".into(),
                );
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn escape_problem(escaped: u8) -> Option<String> {
    match escaped {
        b'd' | b'D' | b'w' | b'W' | b's' | b'S' | b'b' | b'B' => None,
        // Character escapes RE2 and this engine read alike (`\x41`, `\x{41}`, `\t`, ...).
        b'a' | b'f' | b't' | b'n' | b'r' | b'v' | b'x' => None,
        c if c.is_ascii_digit() => Some("uses an octal or back-reference escape; write \\x41 for a byte".into()),
        b'A' | b'z' => Some("uses `\\A` or `\\z`; the pattern is anchored for you".into()),
        b'p' | b'P' => Some("uses a Unicode class `\\p`; write the characters out".into()),
        c if c.is_ascii_punctuation() => None,
        c => Some(format!("uses the unknown escape `\\{}`", c as char)),
    }
}

/// Whether `name` is an HTTP token (RFC 9110 `tchar`s), 1 to 128 bytes.
pub(crate) fn is_header_token(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&b))
}

/// Header names no template sends from a caller or from its configuration: routing,
/// forwarding, identity, hop-by-hop and method-override headers (upstream's list and
/// the ones `call_target` drops), compared without regard to case.
const ROUTING_AND_IDENTITY: &[&str] = &[
    "accept-encoding",
    "cf-connecting-ip",
    "connection",
    "content-length",
    "cookie",
    "forwarded",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "remote-user",
    "te",
    "trailer",
    "transfer-encoding",
    "true-client-ip",
    "upgrade",
    "user-agent",
    "via",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
    "x-real-ip",
    "x-tunnel-traffic-source",
];
/// Prefixes of the same family.
const ROUTING_PREFIXES: &[&str] = &[
    "x-forwarded-",
    "x-envoy-",
    "x-original-",
    "x-rewrite-",
    "x-auth-request-",
    "x-openai-",
    "x-custom-cf-",
    "proxy-",
];
/// Words a caller's header name may not contain (credentials stay in fixed headers).
const CREDENTIAL_WORDS: &[&str] = &["authorization", "cookie", "key", "secret", "token", "password"];

/// Whether `name` is a routing or identity header (never sent by a template).
pub(crate) fn is_routing_or_identity(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ROUTING_AND_IDENTITY.contains(&lower.as_str()) || ROUTING_PREFIXES.iter().any(|p| lower.starts_with(p))
}

/// Whether a caller's header `name` names a credential (`ApiKey`, `X-Auth-Token`, ...).
pub(crate) fn names_a_credential(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CREDENTIAL_WORDS.iter().any(|w| lower.contains(w))
}

/// `x-request-tag` as `X-Request-Tag` (Go's canonical form).
pub(crate) fn canonical_header(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    out
}

/// Go's `url.QueryEscape`: unreserved bytes kept, a space as `+`, every other byte as
/// `%XX`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A regular expression matching any case-folding of one of `values`, anchored, as
/// the `not.pattern` of a parameter's schema (`all` as `^(?:[aA][lL][lL])$`).
pub(crate) fn case_folded_alternatives(values: &[String]) -> String {
    let alternatives: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| {
                    // Values are of the unreserved set: only `.` is a metacharacter, and
                    // `-`, `~` stay bare (an ECMAScript `u`-mode parser, as JSON Schema
                    // validators use, refuses `\-` and `\~`).
                    if c.is_ascii_alphabetic() {
                        format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                    } else if c == '.' {
                        "\\.".to_owned()
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!("^(?:{})$", alternatives.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_refuse_what_re2_reads_differently() {
        assert_eq!(pattern_problem("^[A-Za-z0-9_-]+$"), None);
        assert_eq!(pattern_problem(r"(?:CASE|case)-\d{1,6}"), None);
        for bad in [
            "(?i)abc",
            "a(?=b)",
            "a(?!b)",
            r"\Aabc",
            r"abc\z",
            r"\p{L}+",
            "[[:alpha:]]",
            r"\q",
            "abc\\",
            "caf\u{e9}",
            "",
        ] {
            assert!(pattern_problem(bad).is_some(), "{bad:?} must be refused");
        }
        assert!(pattern_problem(&"a".repeat(513)).is_some());
    }

    #[test]
    fn caller_header_names_are_sorted_into_routing_and_credentials() {
        assert!(is_routing_or_identity("X-Forwarded-For"));
        assert!(is_routing_or_identity("host"));
        assert!(is_routing_or_identity("X-HTTP-Method-Override"));
        assert!(!is_routing_or_identity("X-Request-Tag"));
        assert!(names_a_credential("ApiKey"));
        assert!(names_a_credential("X-Auth-Token"));
        assert!(!names_a_credential("Accept"));
        assert_eq!(canonical_header("x-request-TAG"), "X-Request-Tag");
    }

    #[test]
    fn the_query_is_escaped_as_go_escapes_it() {
        assert_eq!(query_escape("a b&c=d~e*"), "a+b%26c%3Dd~e%2A");
        assert_eq!(query_escape("é"), "%C3%A9");
    }

    #[test]
    fn reserved_values_become_a_case_folded_alternation() {
        let p = case_folded_alternatives(&["all".into(), "a.b".into()]);
        assert_eq!(p, r"^(?:[aA][lL][lL]|[aA]\.[bB])$");
        let re = regex::Regex::new(&p).unwrap();
        assert!(re.is_match("ALL") && re.is_match("A.b") && !re.is_match("axb"));
    }
}
