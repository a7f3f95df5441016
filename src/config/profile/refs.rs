//! The official client's value forms, read as its loader reads them, each turned into
//! what tunnelgate's key takes (pure functions; the environment is a snapshot):
//!
//! - a **value** (`control_plane.base_url`, `url_path`, `health.listen_addr`, a server's
//!   `url`, a `command`, a target's `url`): a literal, `env:NAME` or `file:/path` (the
//!   file's content, trimmed), resolved when the profile is read, since tunnelgate's key
//!   takes a plain value;
//! - a **path** (`ca_bundle`, certificates and keys, a unix socket): a path, `env:NAME`
//!   (the variable holds the path) or `file:/path` (that path), resolved likewise;
//! - a **proxy**: an `http(s)://` URL or `env:NAME`, kept as tunnelgate's own reference;
//! - a **secret** (`control_plane.api_key`, header values): a literal, `env:NAME` or
//!   `file:/path`, kept as tunnelgate's reference (never resolved, never shown);
//! - a Go **duration** (`30000ms`, `1m30s`, `1.5s`), as tunnelgate's duration text.
//!
//! Each error is the problem and what to do, in words, without the value.

use std::time::Duration;

use super::super::layers::{read_text, EnvVars};

/// A file a `file:` value reference may name is read up to this size.
const MAX_VALUE_FILE: u64 = 64 * 1024;

/// A resolved value, and where it came from when it was a reference (for a note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    pub(super) value: String,
    pub(super) from: Option<String>,
}

/// A value reference (`resolveConfigValueReference`): `env:` and `file:` in any case,
/// the name or path trimmed, the result trimmed and never empty.
pub(super) fn value(raw: &str, env: &EnvVars) -> Result<Resolved, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty; give a value, or remove the key".to_owned());
    }
    let Some((kind, rest)) = reference(raw) else {
        return Ok(Resolved {
            value: raw.to_owned(),
            from: None,
        });
    };
    let value = match kind {
        Kind::Env => from_env(rest, env)?,
        Kind::File => {
            let path = std::path::Path::new(rest);
            let text = read_text(path, MAX_VALUE_FILE).map_err(|e| {
                format!("cannot read the file {rest} it names ({e}); the official client reads it when it loads the profile too")
            })?;
            text.trim().to_owned()
        }
    };
    if value.is_empty() {
        return Err(format!("the {} it names is empty", described(kind, rest)));
    }
    Ok(Resolved {
        value,
        from: Some(described(kind, rest)),
    })
}

/// A path reference (`resolvePathReference`): `None` when blank (unset, as upstream).
pub(super) fn path(raw: &str, env: &EnvVars) -> Result<Option<Resolved>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let resolved = match reference(raw) {
        None => Resolved {
            value: raw.to_owned(),
            from: None,
        },
        Some((Kind::File, "")) => return Err("\"file:\" needs a path, e.g. \"file:/etc/ssl/ca.pem\"".to_owned()),
        Some((Kind::File, path)) => Resolved {
            value: path.to_owned(),
            from: None,
        },
        Some((Kind::Env, name)) => Resolved {
            value: from_env(name, env)?,
            from: Some(described(Kind::Env, name)),
        },
    };
    Ok(Some(resolved))
}

/// A proxy (`parseProxyReference`): `env:NAME` (lowercase, as upstream) is kept as
/// tunnelgate's reference; anything else must be an http(s) URL with a host.
pub(super) fn proxy(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty; give a proxy URL (\"http://host:port\") or \"env:NAME\", or remove the key".to_owned());
    }
    if let Some(name) = raw.strip_prefix("env:") {
        let name = name.trim();
        check_env_name(name)?;
        return Ok(format!("env:{name}"));
    }
    match url::Url::parse(raw) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(raw.to_owned())
        }
        _ => Err("is not a proxy URL: write \"http://host:port\" (or https), or \"env:NAME\"".to_owned()),
    }
}

/// A secret (`resolveHeaderValue`, `resolveConfigSecretReference`): `env:` and `file:`
/// in any case become tunnelgate's lowercase reference; a literal stays a literal.
pub(super) fn secret(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty; give \"env:NAME\", \"file:/path\" or the value, or remove the key".to_owned());
    }
    match reference(raw) {
        None => Ok(raw.to_owned()),
        Some((Kind::Env, name)) => {
            check_env_name(name)?;
            Ok(format!("env:{name}"))
        }
        Some((Kind::File, "")) => Err("\"file:\" needs a path, e.g. \"file:/run/secrets/key\"".to_owned()),
        Some((Kind::File, path)) => Ok(format!("file:{path}")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Env,
    File,
}

/// `env:` or `file:` in any case, and the trimmed rest.
fn reference(raw: &str) -> Option<(Kind, &str)> {
    // Five characters at most: when they start with `env:` or are `file:`, each is ASCII.
    let head = raw.chars().take(5).collect::<String>().to_ascii_lowercase();
    if head.starts_with("env:") {
        Some((Kind::Env, raw[4..].trim()))
    } else if head == "file:" {
        Some((Kind::File, raw[5..].trim()))
    } else {
        None
    }
}

fn described(kind: Kind, rest: &str) -> String {
    match kind {
        Kind::Env => format!("env:{rest}"),
        Kind::File => format!("file:{rest}"),
    }
}

/// The trimmed value of `name`, set and not blank.
fn from_env(name: &str, env: &EnvVars) -> Result<String, String> {
    check_env_name(name)?;
    match env.get(name).map(str::trim) {
        None => Err(format!(
            "names the environment variable {name}, which is not set; set it (the official client reads it when it loads the profile too)"
        )),
        Some("") => Err(format!("names the environment variable {name}, which is empty")),
        Some(value) => Ok(value.to_owned()),
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} after \"env:\" is not an environment variable name (write e.g. \"env:CONTROL_PLANE_API_KEY\")"
        ))
    }
}

/// A Go `time.ParseDuration` text: an optional sign, then one or more decimal numbers
/// each with a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`); `0` alone is zero.
/// Negative durations are refused (no key takes one).
pub(super) fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (write e.g. \"30s\", \"250ms\", \"1m30s\")");
    let mut rest = text.trim();
    if let Some(unsigned) = rest.strip_prefix('+') {
        rest = unsigned;
    } else if rest.starts_with('-') {
        return Err(format!("{text:?} is negative; give a duration of zero or more"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        nanos += decimal_times(number, scale).ok_or_else(bad)?;
        rest = next;
    }
    let nanos = u64::try_from(nanos).map_err(|_| format!("{text:?} is too long a duration"))?;
    Ok(Duration::from_nanos(nanos))
}

/// `number` (digits, at most one `.`) times `scale`, truncated to whole nanoseconds.
fn decimal_times(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut total = whole.checked_mul(scale)?;
    let mut place = scale;
    for digit in fraction.chars() {
        place /= 10;
        total += u128::from(digit.to_digit(10)?) * place;
    }
    Some(total)
}

/// `duration` as tunnelgate's text, exact: in the largest unit that divides it.
pub(super) fn duration_text(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    format!("{nanos}ns")
}
