//! `Secret`: a credential resolved from its reference (`env:NAME`, `file:/path` or a
//! literal) when the configuration is loaded.
//!
//! Invariant: the value leaves this type only through [`Secret::expose`]. `Debug` and
//! `Display` print `<redacted>`; descriptions and errors name the reference only.
//!
//! A reference whose variable or file gives no value here fails the load, except in an
//! offline load (`OfflineConfig`, for the commands that read only local files): there it
//! is kept unresolved, with an empty value and the error it would have been. A malformed
//! reference, or a value that cannot be sent, fails every load. Only an
//! `OfflineConfig` holds unresolved secrets; every `Config` it does not wrap has all of
//! its secrets resolved.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{io_words, ConfigError, ErrorKind};
use super::layers::{read_text, EnvVars};

/// A resolved secret (or, in an offline load only, an unresolved one). `Debug` and
/// `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// Empty when `unresolved`.
    value: String,
    origin: Origin,
    /// Why the reference gave no value, in an offline load; `None` once resolved.
    unresolved: Option<Box<ConfigError>>,
}

/// Why a reference gave no value.
enum Failure {
    /// The reference itself is wrong: an error in every load.
    Invalid(ConfigError),
    /// Its variable is unset or empty, or its file cannot be read or is empty: an error,
    /// except in an offline load.
    Unavailable(Origin, ConfigError),
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
            unresolved: None,
        }
    }

    /// The value, for the one place that must send it (empty for an unresolved secret,
    /// which only an offline load holds and nothing sends).
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Why the reference gave no value, for a secret an offline load kept unresolved;
    /// `None` for every resolved secret.
    pub(crate) fn unresolved(&self) -> Option<&ConfigError> {
        self.unresolved.as_deref()
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

    /// The reference with the value's length, for printing the effective configuration
    /// (`"env:NAME (unresolved)"` when an offline load could not read it).
    pub(super) fn masked(&self) -> String {
        if self.unresolved.is_some() {
            return format!("{} (unresolved)", self.describe());
        }
        let len = self.value.len();
        match &self.origin {
            Origin::Env(_) => format!("{} (set, {len} bytes)", self.describe()),
            Origin::File(_) => format!("{} (read, {len} bytes)", self.describe()),
            Origin::Literal => "<literal, redacted>".to_owned(),
        }
    }

    /// Resolves `reference` for `key`, reading `env` or the file it names. In an offline
    /// load (`env` says so) a reference with no value here is kept unresolved, and noted
    /// in `env`.
    pub(super) fn resolve(key: &str, reference: &str, env: &EnvVars) -> Result<Secret, ConfigError> {
        let secret = match Secret::read(key, reference, env) {
            Ok(secret) => secret,
            Err(Failure::Invalid(error)) => return Err(error),
            Err(Failure::Unavailable(origin, error)) => {
                if !env.keeps_unresolved(&error) {
                    return Err(error);
                }
                return Ok(Secret {
                    value: String::new(),
                    origin,
                    unresolved: Some(Box::new(error)),
                });
            }
        };
        secret.checked(key)
    }

    fn read(key: &str, reference: &str, env: &EnvVars) -> Result<Secret, Failure> {
        let lowered = reference.to_ascii_lowercase();
        if let Some(name) = reference.strip_prefix("env:") {
            from_env(key, name, env)
        } else if let Some(path) = reference.strip_prefix("file:") {
            from_file(key, Path::new(path))
        } else if lowered.starts_with("env:") || lowered.starts_with("file:") {
            Err(Failure::Invalid(secret_error(
                key,
                "secret references are lowercase: write \"env:NAME\" or \"file:/path\"",
            )))
        } else if reference.is_empty() {
            let fix = "use \"env:NAME\", \"file:/path\" or a literal key";
            Err(Failure::Invalid(secret_error(key, format!("is empty; {fix}"))))
        } else {
            Ok(Secret::literal(reference))
        }
    }

    /// The secret when its value can be sent as a bearer credential: every byte an HTTP
    /// token character or one of token68's `/` and `=` (no space, no control character,
    /// no delimiter), as the official client refuses a malformed API key at start. The
    /// error names the reference, never the value. An unresolved secret passes (an
    /// offline load has no value to check).
    pub(super) fn header_token(self, key: &str) -> Result<Secret, ConfigError> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/=".contains(&b);
        if self.unresolved.is_some() || self.value.bytes().all(token) {
            return Ok(self);
        }
        let what = self.describe();
        let problem = format!(
            "{what} is not a valid HTTP header token: it holds a space, a control character or a delimiter such as `\"` `,` `;` `:` (the value is not shown); copy the key again without surrounding text"
        );
        Err(secret_error(key, problem))
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

fn from_env(key: &str, name: &str, env: &EnvVars) -> Result<Secret, Failure> {
    if !is_env_name(name) {
        let problem = format!("{name:?} is not an environment variable name (use e.g. \"env:CONTROL_PLANE_API_KEY\")");
        return Err(Failure::Invalid(secret_error(key, problem)));
    }
    let origin = Origin::Env(name.to_owned());
    let Some(value) = env.get(name) else {
        let problem = format!("environment variable {name} is not set (referenced as \"env:{name}\")");
        return Err(Failure::Unavailable(origin, secret_error(key, problem)));
    };
    if value.is_empty() {
        let problem = format!("environment variable {name} is empty");
        return Err(Failure::Unavailable(origin, secret_error(key, problem)));
    }
    Ok(Secret {
        value: value.to_owned(),
        origin,
        unresolved: None,
    })
}

/// A secret file larger than this is refused: a key is a line, and a path that never ends
/// (`file:/dev/zero`) must not be read into memory whole.
const MAX_SECRET_FILE: u64 = 64 * 1024;

fn from_file(key: &str, path: &Path) -> Result<Secret, Failure> {
    if path.as_os_str().is_empty() {
        return Err(Failure::Invalid(secret_error(
            key,
            "\"file:\" needs a path, e.g. \"file:/run/secrets/api_key\"",
        )));
    }
    let origin = Origin::File(path.to_owned());
    let contents = match read_text(path, MAX_SECRET_FILE) {
        Ok(contents) => contents,
        Err(e) => {
            let problem = format!("cannot read secret file {}: {}", path.display(), io_words(&e));
            return Err(Failure::Unavailable(origin, secret_error(key, problem)));
        }
    };
    let value = strip_one_newline(contents);
    if value.is_empty() {
        let problem = format!("secret file {} is empty", path.display());
        return Err(Failure::Unavailable(origin, secret_error(key, problem)));
    }
    Ok(Secret {
        value,
        origin,
        unresolved: None,
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
