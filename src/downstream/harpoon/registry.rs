//! The Harpoon targets: the only URLs `call_target` may reach, each under a label.
//!
//! Invariants:
//! - a label matches [`LABEL_PATTERN`] and is unique; at most [`MAX_TARGETS`] targets;
//! - a stored URL is `http(s)` with a host, an absolute path (`/` when it had none, as
//!   upstream reads it) with no `.`/`..` segment,
//!   its scheme and host lower-cased and everything else kept byte for byte (as
//!   upstream); the spelling it was registered with is kept for the audience lookup;
//! - an auto-registered target is keyed on its role and group: registering the same key
//!   again changes nothing, or replaces the URL when it changed, so repeated discoveries
//!   never grow the registry (upstream adds a new `-1`, `-2`, ... set every time).
//!
//! Pure: no I/O, no clock.

use std::collections::BTreeSet;

use url::Url;

/// Most targets, configured and registered together (upstream's limit).
pub(crate) const MAX_TARGETS: usize = 10_000;
/// What a label looks like (upstream's pattern).
pub(crate) const LABEL_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,63}$";

/// One target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) label: String,
    /// Normalized: scheme and host lower-cased, the rest as given.
    pub(crate) url: String,
    /// As registered (the audience lookup answers with it).
    pub(crate) original: String,
    pub(crate) description: String,
    /// `config` for configured targets, `oauth` for registered ones.
    pub(crate) category: String,
    pub(crate) tags: Vec<String>,
    /// The registration key (role, group) of an auto-registered target.
    pub(crate) key: Option<(String, String)>,
}

impl Target {
    /// `scheme://host[:port]`: what logs, `/status` and the page show of its URL.
    pub(crate) fn origin(&self) -> String {
        redacted_origin(&self.url)
    }

    pub(crate) fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

/// `scheme://host[:port]` of `url` (no userinfo, path, query or fragment).
pub(crate) fn redacted_origin(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{}://{h}:{p}", u.scheme()),
            (Some(h), None) => format!("{}://{h}", u.scheme()),
            _ => format!("{}://", u.scheme()),
        },
        Err(_) => "<invalid url>".to_owned(),
    }
}

/// Why a URL or a label cannot be a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Label,
    DuplicateLabel,
    Url(&'static str),
    Plaintext,
    Full,
}

impl Refusal {
    pub(crate) fn words(&self) -> &'static str {
        match self {
            Self::Label => "is not a valid label (lower-case letters, digits, `_` and `-`, starting with a letter or digit, at most 64)",
            Self::DuplicateLabel => "is a label given twice",
            Self::Url(words) => words,
            Self::Plaintext => "is plaintext http; set harpoon.allow_plaintext_http = true to allow it",
            Self::Full => "cannot be added: the registry holds its limit of 10000 targets",
        }
    }
}

pub(crate) fn valid_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// `url` as stored: scheme and host lower-cased, the rest byte for byte; or why not.
pub(crate) fn normalize(url: &str, allow_plaintext: bool) -> Result<String, Refusal> {
    let parsed = Url::parse(url).map_err(|_| Refusal::Url("is not a URL"))?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_plaintext => {}
        "http" => return Err(Refusal::Plaintext),
        _ => return Err(Refusal::Url("must be an http(s) URL")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Refusal::Url("has no host"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Refusal::Url("is not an absolute URL"));
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // No path is the root, as the official client reads it (`https://h` is `https://h/`).
    let tail = if tail.starts_with('/') {
        tail.to_owned()
    } else {
        format!("/{tail}")
    };
    let path = tail.split(['?', '#']).next().unwrap_or_default();
    if path.split('/').any(is_dot_segment) {
        return Err(Refusal::Url("has a `.` or `..` path segment"));
    }
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    let mut out = scheme.to_ascii_lowercase();
    out.push_str("://");
    if let Some(user) = userinfo {
        out.push_str(user);
        out.push('@');
    }
    out.push_str(&host.to_ascii_lowercase());
    out.push_str(&tail);
    Ok(out)
}

fn is_dot_segment(segment: &str) -> bool {
    let decoded = segment.replace("%2e", ".").replace("%2E", ".");
    decoded == "." || decoded == ".."
}

/// What registering one discovered record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Registered {
    /// A new target.
    Added,
    /// The key's target now points at a new URL.
    Replaced,
    /// The key's target already had this URL.
    Unchanged,
}

/// The targets, in registration order.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    targets: Vec<Target>,
}

impl Registry {
    pub(crate) fn len(&self) -> usize {
        self.targets.len()
    }

    pub(crate) fn targets(&self) -> &[Target] {
        &self.targets
    }

    pub(crate) fn get(&self, label: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.label == label)
    }

    /// The targets whose stored URL is exactly `url` once its scheme and host are
    /// lower-cased (a redirect's destination, a string in a result), oldest first.
    pub(crate) fn with_url(&self, url: &str) -> impl Iterator<Item = &Target> {
        let normalized = normalize(url, true).ok();
        self.targets
            .iter()
            .filter(move |t| normalized.as_deref() == Some(t.url.as_str()))
    }

    /// A configured target.
    pub(crate) fn configure(
        &mut self,
        label: &str,
        url: &str,
        description: &str,
        allow_plaintext: bool,
    ) -> Result<(), Refusal> {
        if !valid_label(label) {
            return Err(Refusal::Label);
        }
        if self.get(label).is_some() {
            return Err(Refusal::DuplicateLabel);
        }
        let normalized = normalize(url, allow_plaintext)?;
        if self.targets.len() >= MAX_TARGETS {
            return Err(Refusal::Full);
        }
        self.targets.push(Target {
            label: label.to_owned(),
            url: normalized,
            original: url.to_owned(),
            description: description.to_owned(),
            category: "config".to_owned(),
            tags: Vec::new(),
            key: None,
        });
        Ok(())
    }

    /// Registers one discovered record under `key` (role, group): the label is
    /// `oauth-<role>-0`, suffixed `-1`, `-2`, ... only when a target of another key holds
    /// it. Returns the label and what changed.
    pub(crate) fn register(
        &mut self,
        key: (String, String),
        url: &str,
        description: &str,
        tags: Vec<String>,
        allow_plaintext: bool,
    ) -> Result<(String, Registered), Refusal> {
        let normalized = normalize(url, allow_plaintext)?;
        if let Some(existing) = self.targets.iter_mut().find(|t| t.key.as_ref() == Some(&key)) {
            if existing.url == normalized {
                return Ok((existing.label.clone(), Registered::Unchanged));
            }
            existing.url = normalized;
            existing.original = url.to_owned();
            existing.tags = tags;
            return Ok((existing.label.clone(), Registered::Replaced));
        }
        if self.targets.len() >= MAX_TARGETS {
            return Err(Refusal::Full);
        }
        let label = self.free_label(&sanitize(&format!("oauth-{}-0", key.0)))?;
        self.targets.push(Target {
            label: label.clone(),
            url: normalized,
            original: url.to_owned(),
            description: description.to_owned(),
            category: "oauth".to_owned(),
            tags,
            key: Some(key),
        });
        Ok((label, Registered::Added))
    }

    fn free_label(&self, base: &str) -> Result<String, Refusal> {
        let taken: BTreeSet<&str> = self.targets.iter().map(|t| t.label.as_str()).collect();
        if !taken.contains(base) {
            return Ok(base.to_owned());
        }
        for n in 1..10_000u32 {
            let suffix = format!("-{n}");
            let cut = base.len().min(64 - suffix.len());
            let stem = base[..cut].trim_end_matches(['-', '_']);
            let label = format!("{stem}{suffix}");
            if !taken.contains(label.as_str()) {
                return Ok(label);
            }
        }
        Err(Refusal::Full)
    }
}

/// Upstream's label sanitizing: lower-case, each run outside `[a-z0-9_-]` becomes `-`,
/// `-` and `_` trimmed from both ends, `x` prefixed when the first character is not a
/// letter or digit, at most 64 characters.
pub(crate) fn sanitize(raw: &str) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in raw.to_ascii_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let mut out = out.trim_matches(['-', '_']).to_owned();
    if !out.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        out.insert(0, 'x');
    }
    out.truncate(64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_its_path_query_and_userinfo_and_lowers_scheme_and_host() {
        assert_eq!(
            normalize("HTTPS://AUTH.Internal:8443////a/B?z=1&a=%2F#f", false).unwrap(),
            "https://auth.internal:8443////a/B?z=1&a=%2F#f"
        );
        assert_eq!(normalize("http://h/x", false), Err(Refusal::Plaintext));
        assert!(normalize("http://h/x", true).is_ok());
        assert_eq!(normalize("https://H", false).unwrap(), "https://h/");
        assert_eq!(normalize("https://h?x=1", false).unwrap(), "https://h/?x=1");
        assert_eq!(normalize("https://h:8443", false).unwrap(), "https://h:8443/");
        assert!(matches!(normalize("https://h/a/../b", false), Err(Refusal::Url(_))));
        assert!(matches!(normalize("https://h/a/%2e%2e/b", false), Err(Refusal::Url(_))));
        assert!(matches!(normalize("ftp://h/a", false), Err(Refusal::Url(_))));
    }

    #[test]
    fn labels_follow_the_pattern() {
        for good in ["a", "0", "oauth-token-endpoint-0", "a_b-c"] {
            assert!(valid_label(good), "{good}");
        }
        for bad in ["", "-a", "A", " a", "a b", &"a".repeat(65)] {
            assert!(!valid_label(bad), "{bad}");
        }
        assert_eq!(sanitize("oauth-Token Endpoint-0"), "oauth-token-endpoint-0");
        assert_eq!(sanitize("a!!b"), "a-b");
        assert_eq!(sanitize("__x"), "x");
        assert_eq!(sanitize("é"), "x");
    }

    #[test]
    fn registering_the_same_key_again_changes_nothing_and_a_new_url_replaces_it() {
        let mut r = Registry::default();
        let key = ("token-endpoint".to_owned(), "g".to_owned());
        let first = r.register(key.clone(), "https://a/token", "d", vec![], false).unwrap();
        assert_eq!(first, ("oauth-token-endpoint-0".to_owned(), Registered::Added));
        let again = r.register(key.clone(), "https://A/token", "d", vec![], false).unwrap();
        assert_eq!(again.1, Registered::Unchanged);
        let moved = r.register(key, "https://b/token", "d", vec![], false).unwrap();
        assert_eq!(moved, ("oauth-token-endpoint-0".to_owned(), Registered::Replaced));
        assert_eq!(r.len(), 1);
        assert_eq!(r.get("oauth-token-endpoint-0").unwrap().url, "https://b/token");
        // Another group's token endpoint gets a suffixed label.
        let other = r
            .register(
                ("token-endpoint".into(), "h".into()),
                "https://c/token",
                "d",
                vec![],
                false,
            )
            .unwrap();
        assert_eq!(other.0, "oauth-token-endpoint-0-1");
    }

    #[test]
    fn configured_labels_are_unique_and_valid() {
        let mut r = Registry::default();
        r.configure("cfg", "https://h/x", "", false).unwrap();
        assert_eq!(
            r.configure("cfg", "https://h/y", "", false),
            Err(Refusal::DuplicateLabel)
        );
        assert_eq!(r.configure("Cfg", "https://h/y", "", false), Err(Refusal::Label));
        assert_eq!(r.with_url("HTTPS://H/x").count(), 1);
        assert_eq!(r.with_url("https://h/x/").count(), 0);
        assert_eq!(r.get("cfg").unwrap().origin(), "https://h");
    }
}
