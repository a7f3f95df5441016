//! The environment a stdio child starts with (pure).
//!
//! The child never inherits the gateway's environment: it gets a minimal base taken from
//! it ([`BASE_VARS`], only those present) plus the channel's configured `env`. Variables
//! that carry the gateway's own configuration or credentials (`TUNNELGATE_*`,
//! `CONTROL_PLANE_*`) are refused from both sources, whatever config validation did.

use std::collections::BTreeMap;

/// The only variables copied from the gateway's own environment.
pub(super) const BASE_VARS: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// Whether a variable must never reach a child (case-insensitive prefix match).
pub(super) fn is_forbidden(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("TUNNELGATE_") || upper.starts_with("CONTROL_PLANE_")
}

/// The child's environment, and the names of configured variables that were refused.
pub(super) fn child_env(
    base: impl IntoIterator<Item = (String, String)>,
    configured: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut env: BTreeMap<String, String> = base
        .into_iter()
        .filter(|(name, _)| BASE_VARS.contains(&name.as_str()))
        .collect();
    let mut refused = Vec::new();
    for (name, value) in configured {
        if is_forbidden(name) || name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            refused.push(name.clone());
        } else {
            env.insert(name.clone(), value.clone());
        }
    }
    (env, refused)
}

/// The gateway's own environment, as far as it is valid UTF-8 (the base is only read
/// from it; anything else is never passed on).
pub(super) fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn only_the_base_variables_are_taken_from_the_gateway() {
        let base = pairs(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/gw"),
            ("TUNNELGATE_CONTROL_PLANE__API_KEY", "sk-1"),
            ("CONTROL_PLANE_API_KEY", "sk-2"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("LC_ALL", "C.UTF-8"),
        ]);
        let (env, refused) = child_env(base, &BTreeMap::new());
        assert_eq!(env.keys().collect::<Vec<_>>(), ["HOME", "LC_ALL", "PATH"]);
        assert!(refused.is_empty());
    }

    #[test]
    fn configured_variables_go_on_top_but_gateway_variables_are_refused() {
        let configured = BTreeMap::from([
            ("LOG_LEVEL".to_owned(), "debug".to_owned()),
            ("PATH".to_owned(), "/opt/bin".to_owned()),
            ("tunnelgate_x".to_owned(), "1".to_owned()),
            (
                "CONTROL_PLANE_BASE_URL".to_owned(),
                "https://example.invalid".to_owned(),
            ),
            ("BAD=NAME".to_owned(), "1".to_owned()),
        ]);
        let (env, refused) = child_env(pairs(&[("PATH", "/usr/bin")]), &configured);
        assert_eq!(env.get("PATH").map(String::as_str), Some("/opt/bin"));
        assert_eq!(env.get("LOG_LEVEL").map(String::as_str), Some("debug"));
        assert_eq!(env.len(), 2);
        assert_eq!(refused, ["BAD=NAME", "CONTROL_PLANE_BASE_URL", "tunnelgate_x"]);
    }
}
