//! `Secret`: a credential resolved from its reference (`env:NAME`, `file:/path` or a
//! literal) when the configuration is loaded.
//!
//! Invariant: the value leaves this type only through [`Secret::expose`]. `Debug` and
//! `Display` print `<redacted>`; descriptions and errors name the reference only.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{io_words, ConfigError, ErrorKind};
use super::layers::{read_text, EnvVars};

/// A resolved secret. `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    origin: Origin,
}

/// Where a secret's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Env(String),
    File(PathBuf),
    Literal,
}

impl Secret {
    /// A secret given inline (discouraged in files: it is never printed, but it is stored).
    pub fn literal(value: impl Into<String>) -> Secret {
        Secret {
            value: value.into(),
            origin: Origin::Literal,
        }
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The reference: `env:NAME`, `file:/path` or `<literal>`; never the value.
    pub fn describe(&self) -> String {
        match &self.origin {
            Origin::Env(name) => format!("env:{name}"),
            Origin::File(path) => format!("file:{}", path.display()),
            Origin::Literal => "<literal>".to_owned(),
        }
    }

    /// The name of the environment variable it was read from, if any.
    pub(super) fn env_var(&self) -> Option<&str> {
        match &self.origin {
            Origin::Env(name) => Some(name),
            Origin::File(_) | Origin::Literal => None,
        }
    }

    /// The reference with the value's length, for printing the effective configuration.
    pub(super) fn masked(&self) -> String {
        let len = self.value.len();
        match &self.origin {
            Origin::Env(_) => format!("{} (set, {len} bytes)", self.describe()),
            Origin::File(_) => format!("{} (read, {len} bytes)", self.describe()),
            Origin::Literal => "<literal, redacted>".to_owned(),
        }
    }

    /// The same reference with another value (a normalized form of it).
    pub(super) fn replaced(&self, value: String) -> Secret {
        Secret {
            value,
            origin: self.origin.clone(),
        }
    }

    /// Resolves `reference` for `key`, reading `env` or the file it names.
    pub(super) fn resolve(key: &str, reference: &str, env: &EnvVars) -> Result<Secret, ConfigError> {
        let lowered = reference.to_ascii_lowercase();
        let secret = if let Some(name) = reference.strip_prefix("env:") {
            from_env(key, name, env)?
        } else if let Some(path) = reference.strip_prefix("file:") {
            from_file(key, Path::new(path))?
        } else if lowered.starts_with("env:") || lowered.starts_with("file:") {
            return Err(secret_error(
                key,
                "secret references are lowercase: write \"env:NAME\" or \"file:/path\"",
            ));
        } else if reference.is_empty() {
            let fix = "use \"env:NAME\", \"file:/path\" or a literal key";
            return Err(secret_error(key, format!("is empty; {fix}")));
        } else {
            Secret::literal(reference)
        };
        secret.checked(key)
    }

    /// Rejects values that cannot be sent as a header value.
    fn checked(self, key: &str) -> Result<Secret, ConfigError> {
        let what = self.describe();
        if self.value.chars().any(char::is_control) {
            let problem = format!("{what} contains a newline or control character, which cannot be sent in a header");
            return Err(secret_error(key, problem));
        }
        Ok(self)
    }
}

fn from_env(key: &str, name: &str, env: &EnvVars) -> Result<Secret, ConfigError> {
    if !is_env_name(name) {
        let problem = format!("{name:?} is not an environment variable name (use e.g. \"env:CONTROL_PLANE_API_KEY\")");
        return Err(secret_error(key, problem));
    }
    let value = env.get(name).ok_or_else(|| {
        secret_error(
            key,
            format!("environment variable {name} is not set (referenced as \"env:{name}\")"),
        )
    })?;
    if value.is_empty() {
        return Err(secret_error(key, format!("environment variable {name} is empty")));
    }
    Ok(Secret {
        value: value.to_owned(),
        origin: Origin::Env(name.to_owned()),
    })
}

/// A secret file larger than this is refused: a key is a line, and a path that never ends
/// (`file:/dev/zero`) must not be read into memory whole.
const MAX_SECRET_FILE: u64 = 64 * 1024;

fn from_file(key: &str, path: &Path) -> Result<Secret, ConfigError> {
    if path.as_os_str().is_empty() {
        return Err(secret_error(
            key,
            "\"file:\" needs a path, e.g. \"file:/run/secrets/api_key\"",
        ));
    }
    let contents = read_text(path, MAX_SECRET_FILE).map_err(|e| {
        let problem = format!("cannot read secret file {}: {}", path.display(), io_words(&e));
        secret_error(key, problem)
    })?;
    let value = strip_one_newline(contents);
    if value.is_empty() {
        return Err(secret_error(key, format!("secret file {} is empty", path.display())));
    }
    Ok(Secret {
        value,
        origin: Origin::File(path.to_owned()),
    })
}

/// Removes a single trailing `\n` (or `\r\n`), as editors and `echo` add one.
fn strip_one_newline(mut value: String) -> String {
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    value
}

/// `[A-Za-z_][A-Za-z0-9_]*`
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn secret_error(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(ErrorKind::Secret, key, problem)
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
