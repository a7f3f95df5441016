//! `mcp.oauth_trusted_origins`: the origins OAuth discovery may read besides the MCP
//! server's own, as the official client checks them (`MCP_OAUTH_TRUSTED_ORIGINS`).
//!
//! Invariants of the result: each entry is an origin (`scheme://host[:port]`, the
//! scheme's default port left out, the host lowercased, IPv6 bracketed), sorted and
//! without duplicates. An entry is `http` or `https` with a host, no userinfo, a path that
//! is empty or `/`, no query (not even a bare `?`), no fragment, and a port, if written,
//! of 1 to 65535. Private and loopback origins are allowed: trusting one is the operator's
//! call. A bad entry is an error naming it (`mcp.oauth_trusted_origins[i]`, 0-based),
//! never the whole list.

use std::collections::BTreeSet;

use url::Url;

use super::error::ConfigError;

const KEY: &str = "mcp.oauth_trusted_origins";

/// The checked origins; `raw` is the list as configured (`None`: not configured).
pub(super) fn trusted_origins(raw: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let mut origins = BTreeSet::new();
    for (i, entry) in raw.unwrap_or_default().iter().enumerate() {
        let key = format!("{KEY}[{i}]");
        origins.insert(origin(entry.trim()).map_err(|problem| ConfigError::invalid(key, problem))?);
    }
    Ok(origins.into_iter().collect())
}

/// `MCP_OAUTH_TRUSTED_ORIGINS` as the official client writes it: one origin per line
/// (blank lines skipped).
pub(super) fn split_env(value: &str) -> Vec<String> {
    value
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// One entry as an origin, or what is wrong with it.
fn origin(text: &str) -> Result<String, String> {
    const EXAMPLE: &str = "e.g. \"https://login.example.com\" or \"https://idp.internal:8443\"";
    let lower = text.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://")) else {
        return Err(format!(
            "{text:?} is not an http or https origin; write scheme://host[:port], {EXAMPLE}"
        ));
    };
    if text.contains('?') || text.contains('#') {
        return Err(format!(
            "{text:?} has a query or a fragment; an origin is scheme://host[:port] only"
        ));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!(
            "{text:?} carries user information; an origin is scheme://host[:port] only"
        ));
    }
    if !matches!(&rest[authority.len()..], "" | "/") {
        return Err(format!(
            "{text:?} has a path; an origin is scheme://host[:port] only, {EXAMPLE}"
        ));
    }
    if authority.ends_with(':') {
        return Err(format!(
            "{text:?} has an empty port; write the port (1 to 65535) or leave out the colon"
        ));
    }
    let url = Url::parse(text)
        .map_err(|_| format!("{text:?} is not a valid origin (its host or port does not parse), {EXAMPLE}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host, {EXAMPLE}"));
    }
    if url.port() == Some(0) {
        return Err(format!("{text:?} has port 0; a port is 1 to 65535"));
    }
    Ok(url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_canonical_sorted_and_folded() {
        let raw = vec![
            "https://Login.Example.com/".to_owned(),
            "http://10.0.0.7:8080".to_owned(),
            "https://login.example.com:443".to_owned(),
            "https://[::1]:9443".to_owned(),
        ];
        assert_eq!(
            trusted_origins(Some(raw)).unwrap(),
            [
                "http://10.0.0.7:8080",
                "https://[::1]:9443",
                "https://login.example.com"
            ]
        );
        assert_eq!(trusted_origins(None).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn each_bad_entry_is_named_with_its_problem() {
        for (entry, words) in [
            ("ftp://example.com", "not an http or https origin"),
            ("example.com", "not an http or https origin"),
            ("https://example.com/path", "has a path"),
            ("https://example.com?", "query or a fragment"),
            ("https://example.com/#x", "query or a fragment"),
            ("https://user:pw@example.com", "user information"),
            ("https://example.com:", "empty port"),
            ("https://example.com:65536", "not a valid origin"),
            ("https://example.com:0", "port 0"),
            ("https://[::1", "not a valid origin"),
            ("https://", "not a valid origin"),
        ] {
            let raw = vec!["https://ok.example".to_owned(), entry.to_owned()];
            let err = trusted_origins(Some(raw)).unwrap_err().to_string();
            assert!(err.contains("mcp.oauth_trusted_origins[1]"), "{entry}: {err}");
            assert!(err.contains(words), "{entry}: {err}");
        }
    }

    #[test]
    fn the_official_variable_is_one_origin_per_line() {
        assert_eq!(
            split_env("https://a.example\n\n  https://b.example:8443  \n"),
            ["https://a.example", "https://b.example:8443"]
        );
    }
}
