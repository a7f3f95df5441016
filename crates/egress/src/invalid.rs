//! [`Invalid`]: a setting egress's checks refused, with the key it came from.

use std::fmt;

/// A setting that failed egress's checks: the key (a dotted configuration key, or an
/// environment variable's name) and the problem in plain words. Neither ever carries
/// the value, which may hold a credential; the problem quotes only the offending part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    key: String,
    problem: String,
}

impl Invalid {
    pub(crate) fn new(key: &str, problem: impl Into<String>) -> Invalid {
        Invalid {
            key: key.to_owned(),
            problem: problem.into(),
        }
    }

    /// The key the value was given under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What is wrong with it, without the key.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl std::error::Error for Invalid {}
