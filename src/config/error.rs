//! `ConfigError`: one invalid key, named by its dotted path, and the problem in words.
//!
//! Also maps figment's deserialization errors onto that shape. Messages describe the
//! type that was found, never the value (it may be a secret).

use figment::error::{Actual, Kind};

/// An invalid configuration: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}: {problem}")]
pub struct ConfigError {
    key: String,
    problem: String,
    kind: ErrorKind,
}

/// A URL or proxy egress's checks refused: an invalid value of its key.
impl From<crate::egress::Invalid> for ConfigError {
    fn from(refused: crate::egress::Invalid) -> Self {
        ConfigError::invalid(refused.key(), refused.problem())
    }
}

/// The stable labels behind [`ConfigError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ErrorKind {
    Missing,
    UnknownKey,
    InvalidType,
    InvalidValue,
    Secret,
    UnreadableFile,
    Syntax,
    /// An official profile that cannot be read, or with settings tunnelgate cannot take.
    Profile,
}

impl ConfigError {
    pub(super) fn new(kind: ErrorKind, key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            problem: problem.into(),
            kind,
        }
    }

    pub(super) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::new(ErrorKind::InvalidValue, key, problem)
    }

    /// The dotted key, e.g. `control_plane.tunnel_id` (or the config file's path for
    /// errors about the file as a whole).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The problem in plain words, without the key.
    pub fn problem(&self) -> &str {
        &self.problem
    }

    /// A stable label: `missing`, `unknown_key`, `invalid_type`, `invalid_value`,
    /// `secret`, `unreadable_file`, `syntax` or `profile`.
    pub fn kind(&self) -> &'static str {
        match self.kind {
            ErrorKind::Missing => "missing",
            ErrorKind::UnknownKey => "unknown_key",
            ErrorKind::InvalidType => "invalid_type",
            ErrorKind::InvalidValue => "invalid_value",
            ErrorKind::Secret => "secret",
            ErrorKind::UnreadableFile => "unreadable_file",
            ErrorKind::Syntax => "syntax",
            ErrorKind::Profile => "profile",
        }
    }

    /// Appends which variable or flag set the key (see `layers::with_source`).
    pub(super) fn set_by(mut self, source: &str) -> Self {
        self.problem = format!("{} (set by {source})", self.problem);
        self
    }

    /// Maps the first of figment's errors to the key it concerns.
    pub(super) fn from_figment(error: figment::Error) -> Self {
        let error = error
            .into_iter()
            .next()
            .expect("a figment error holds at least one error");
        let mut path = error.path;
        let (kind, problem) = match error.kind {
            Kind::UnknownField(field, expected) => {
                push_field(&mut path, field);
                (ErrorKind::UnknownKey, unknown_key(&path, expected))
            }
            Kind::MissingField(field) => {
                push_field(&mut path, field.into_owned());
                (ErrorKind::Missing, "missing".to_owned())
            }
            Kind::DuplicateField(field) => {
                push_field(&mut path, field.to_owned());
                (ErrorKind::InvalidValue, "is set twice".to_owned())
            }
            Kind::InvalidType(actual, expected) | Kind::InvalidValue(actual, expected) => (
                ErrorKind::InvalidType,
                format!(
                    "expected {}, found {}",
                    expected_words(&expected),
                    actual_words(&actual)
                ),
            ),
            Kind::InvalidLength(len, expected) => (
                ErrorKind::InvalidValue,
                format!("has {len} elements, expected {expected}"),
            ),
            Kind::UnknownVariant(_, expected) => (
                ErrorKind::InvalidValue,
                format!("is not one of: {}", expected.join(", ")),
            ),
            Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => {
                (ErrorKind::InvalidValue, "is out of range".to_owned())
            }
            Kind::Unsupported(actual) | Kind::UnsupportedKey(actual, _) => (
                ErrorKind::InvalidType,
                format!("{} is not supported here", actual_words(&actual)),
            ),
            Kind::Message(message) => (ErrorKind::InvalidValue, message),
        };
        let key = if path.is_empty() {
            "configuration".to_owned()
        } else {
            path.join(".")
        };
        ConfigError::new(kind, key, problem)
    }
}

/// Figment's path usually ends with the field already; make sure it does.
fn push_field(path: &mut Vec<String>, field: String) {
    if path.last() != Some(&field) {
        path.push(field);
    }
}

/// "unknown key `a.b`", with a suggestion when a known key is one or two edits away.
fn unknown_key(path: &[String], expected: &[&str]) -> String {
    let dotted = path.join(".");
    let field = path.last().map_or("", String::as_str);
    let closest = expected
        .iter()
        .map(|candidate| (strsim::levenshtein(field, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min();
    match closest {
        Some((_, candidate)) => format!("unknown key `{dotted}` (did you mean `{candidate}`?)"),
        None if expected.is_empty() => format!("unknown key `{dotted}`"),
        None => format!("unknown key `{dotted}` (expected one of: {})", expected.join(", ")),
    }
}

/// serde's "expected" phrases in configuration words.
fn expected_words(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number".to_owned(),
        "a sequence" => "an array".to_owned(),
        "a map" => "a table".to_owned(),
        other if other.starts_with("struct ") => "a table".to_owned(),
        other => other.to_owned(),
    }
}

/// The kind of value found, without the value itself.
fn actual_words(actual: &Actual) -> &'static str {
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) => "a whole number",
        Actual::Signed(n) if *n < 0 => "a negative number",
        Actual::Signed(_) => "a whole number",
        Actual::Float(_) => "a decimal number",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Seq => "an array",
        Actual::Map => "a table",
        Actual::Bytes(_) => "bytes",
        Actual::Unit | Actual::Option => "an empty value",
        Actual::NewtypeStruct
        | Actual::Enum
        | Actual::UnitVariant
        | Actual::NewtypeVariant
        | Actual::TupleVariant
        | Actual::StructVariant
        | Actual::Other(_) => "another kind of value",
    }
}

/// An I/O error without the "(os error N)" suffix.
pub(super) fn io_words(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(end) => text[..end].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(dotted: &str) -> Vec<String> {
        dotted.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn a_key_within_two_edits_is_suggested_and_a_farther_one_lists_the_keys() {
        let expected = ["listen", "allow_remote"];
        let table = [
            ("ops.lisen", "unknown key `ops.lisen` (did you mean `listen`?)"),
            ("ops.lstn", "unknown key `ops.lstn` (did you mean `listen`?)"),
            (
                "ops.lst",
                "unknown key `ops.lst` (expected one of: listen, allow_remote)",
            ),
            // Edits count characters, not bytes: two here, though four bytes differ.
            ("ops.lïstén", "unknown key `ops.lïstén` (did you mean `listen`?)"),
        ];
        for (dotted, want) in table {
            assert_eq!(unknown_key(&path(dotted), &expected), want, "{dotted}");
        }
    }

    #[test]
    fn the_nearest_key_wins_and_a_tie_goes_to_the_first_in_sort_order() {
        assert_eq!(
            unknown_key(&path("a.bat"), &["bxt", "bar", "cat"]),
            "unknown key `a.bat` (did you mean `bar`?)"
        );
        assert_eq!(
            unknown_key(&path("a.bxx"), &["axy", "bxy"]),
            "unknown key `a.bxx` (did you mean `bxy`?)"
        );
        assert_eq!(unknown_key(&path("a.b"), &[]), "unknown key `a.b`");
    }
}
