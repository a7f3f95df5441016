//! What a caller declared it can be asked for (pure): the client capabilities of its
//! `initialize` (`sampling`, `elicitation`, `roots`), carried in the `Mcp-Session-Id` the
//! gateway mints for it (`tg1.<random>.<letters>`), so that every replica, and this one
//! after a restart, can tell who may be asked what without any shared state; and which
//! capability each server-to-client request needs.

use serde_json::{Map, Value};

/// Prefix of the `Mcp-Session-Id`s the gateway mints for callers it answers `initialize`.
pub(crate) const SESSION_ID_PREFIX: &str = "tg1.";

/// A client capability a server request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    Sampling,
    Elicitation,
    Roots,
}

impl Need {
    pub(crate) const ALL: [Self; 3] = [Self::Sampling, Self::Elicitation, Self::Roots];

    /// The capability's name in `initialize`.
    pub(crate) fn capability(self) -> &'static str {
        match self {
            Self::Sampling => "sampling",
            Self::Elicitation => "elicitation",
            Self::Roots => "roots",
        }
    }

    /// The capability a server-to-client request with this method needs, if any.
    pub(crate) fn of_method(method: &str) -> Option<Self> {
        match method {
            "sampling/createMessage" => Some(Self::Sampling),
            "elicitation/create" => Some(Self::Elicitation),
            "roots/list" => Some(Self::Roots),
            _ => None,
        }
    }

    fn letter(self) -> char {
        match self {
            Self::Sampling => 's',
            Self::Elicitation => 'e',
            Self::Roots => 'r',
        }
    }
}

/// The client capabilities one caller declared in its own `initialize`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Declared {
    pub(crate) sampling: bool,
    pub(crate) elicitation: bool,
    pub(crate) roots: bool,
}

impl Declared {
    fn has_mut(&mut self, need: Need) -> &mut bool {
        match need {
            Need::Sampling => &mut self.sampling,
            Need::Elicitation => &mut self.elicitation,
            Need::Roots => &mut self.roots,
        }
    }

    /// What it declared, as the `clientCapabilities` of a 2026-07-28 envelope.
    pub(crate) fn capabilities(self) -> Value {
        Value::Object(
            Need::ALL
                .into_iter()
                .filter(|need| self.allows(*need))
                .map(|need| (need.capability().to_owned(), Value::Object(Map::new())))
                .collect(),
        )
    }

    /// Whether it declared any capability a server may ask for.
    pub(crate) fn any(self) -> bool {
        self.sampling || self.elicitation || self.roots
    }

    pub(crate) fn allows(self, need: Need) -> bool {
        match need {
            Need::Sampling => self.sampling,
            Need::Elicitation => self.elicitation,
            Need::Roots => self.roots,
        }
    }

    /// What a caller's `params.capabilities` declares (an object member, whatever its value
    /// but `null`, declares that capability).
    pub(crate) fn of_capabilities(capabilities: Option<&Value>) -> Self {
        let mut declared = Self::default();
        if let Some(Value::Object(caps)) = capabilities {
            for need in Need::ALL {
                *declared.has_mut(need) = caps.get(need.capability()).is_some_and(|v| !v.is_null());
            }
        }
        declared
    }

    /// What the caller with this `Mcp-Session-Id` declared: nothing, for an id the
    /// gateway did not mint (or no id).
    pub(crate) fn of_session_id(id: Option<&str>) -> Self {
        let mut declared = Self::default();
        let Some(rest) = id.and_then(|id| id.strip_prefix(SESSION_ID_PREFIX)) else {
            return declared;
        };
        let Some((_, letters)) = rest.split_once('.') else {
            return declared;
        };
        for need in Need::ALL {
            *declared.has_mut(need) = letters.contains(need.letter());
        }
        declared
    }

    /// A fresh `Mcp-Session-Id` for a caller that declared this: `tg1.<32 hex>.<letters>`.
    pub(crate) fn mint_session_id(self, random_hex: &str) -> String {
        let letters: String = Need::ALL
            .into_iter()
            .filter(|need| self.allows(*need))
            .map(Need::letter)
            .collect();
        format!("{SESSION_ID_PREFIX}{random_hex}.{letters}")
    }
}
