//! `harpoon.targets[i].template`: a parameterized `GET` target of channel `harpoon`
//! (upstream's target templates, `config_version: 2`), validated at load so that a bad
//! policy stops the gateway with the key and the problem, never at the first call.
//!
//! Invariants of a [`HarpoonTemplate`]:
//! - its origin is `https://host[:port]` (or `http` with `harpoon.allow_plaintext_http`),
//!   with no userinfo, path, query or fragment;
//! - every literal path segment and query key, and every value a parameter accepts, is
//!   in the unreserved set (`A-Z a-z 0-9 _ - . ~`), never `.` or `..`, so rendering
//!   never percent-encodes a parameter and never leaves the path it was given;
//! - every parameter is used exactly once, in the path or the query, and every
//!   placeholder names a parameter;
//! - the longest URL any accepted values render fits [`MAX_URL_BYTES`];
//! - fixed headers are resolved secrets; caller headers are allowed by name only, and
//!   neither set names a routing, forwarding or identity header.
//!
//! Pure, except that fixed header values are resolved from their references.

mod build;
mod rules;

use std::collections::BTreeMap;

pub(crate) use rules::{canonical_header, is_header_token, is_routing_or_identity, names_a_credential};

use super::secret::Secret;

/// The longest URL a template may render (upstream's bound, checked at load).
pub(crate) const MAX_URL_BYTES: usize = 4096;
/// The most bytes of header names and values a template request carries: fixed,
/// caller and the managed `User-Agent` together.
pub(crate) const MAX_HEADER_BYTES: usize = 8192;
/// The most headers, fixed and caller-allowed together.
pub(crate) const MAX_HEADERS: usize = 32;
/// The most parameters of one template.
pub(super) const MAX_PARAMETERS: usize = 16;
/// The template grammar's version.
pub(super) const TEMPLATE_VERSION: u32 = 1;

/// One template target, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarpoonTemplate {
    pub label: String,
    pub description: String,
    pub version: u32,
    /// `scheme://host[:port]`, lower-case, no trailing `/`.
    pub origin: String,
    /// The path's segments in order; `[]` for `/`.
    pub path: Vec<Part>,
    /// The query's keys, sorted (as Go's `url.Values.Encode` writes them).
    pub query: Vec<(String, Part)>,
    /// Sorted by name.
    pub parameters: Vec<TemplateParameter>,
    /// Fixed headers in canonical case, with their resolved values.
    pub headers: Vec<(String, Secret)>,
    /// Header names a caller may send, in canonical case, sorted.
    pub allowed_headers: Vec<String>,
}

/// A literal or a parameter's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Parameter(String),
}

/// One declared parameter (always a required string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateParameter {
    pub name: String,
    pub rule: ValueRule,
    pub min_length: usize,
    pub max_length: usize,
    /// Refused without regard to case.
    pub reserved_values: Vec<String>,
    pub description: String,
    pub examples: Vec<String>,
}

/// What a value must match besides its length and character set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueRule {
    Pattern(TemplatePattern),
    Enum(Vec<String>),
}

/// A parameter's `pattern` as written, and compiled anchored (`^(?:...)$`).
#[derive(Debug, Clone)]
pub struct TemplatePattern {
    pub source: String,
    compiled: regex::Regex,
}

impl PartialEq for TemplatePattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for TemplatePattern {}

impl TemplatePattern {
    /// `^(?:source)$`, as the schema shows it.
    pub fn anchored(&self) -> String {
        anchored(&self.source)
    }
}

fn anchored(source: &str) -> String {
    format!("^(?:{source})$")
}

/// Why a value is refused, in the order the checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueProblem {
    Length,
    Forbidden,
    Reserved,
    Pattern,
    Enum,
}

impl ValueProblem {
    /// Upstream's words (after `template parameter NAME `).
    pub fn words(self) -> &'static str {
        match self {
            ValueProblem::Length => "identifier length is outside its bounds",
            ValueProblem::Forbidden => "contains forbidden characters or path segments",
            ValueProblem::Reserved => "is reserved",
            ValueProblem::Pattern => "does not match its pattern",
            ValueProblem::Enum => "is outside its enum",
        }
    }
}

impl TemplateParameter {
    /// Checks one value: length, character set and dot segments, reserved values,
    /// then the pattern or the enum.
    pub fn check(&self, value: &str) -> Result<(), ValueProblem> {
        let len = value.chars().count();
        if len < self.min_length || len > self.max_length {
            return Err(ValueProblem::Length);
        }
        if !rules::is_segment_value(value) {
            return Err(ValueProblem::Forbidden);
        }
        if self.reserved_values.iter().any(|r| r.eq_ignore_ascii_case(value)) {
            return Err(ValueProblem::Reserved);
        }
        match &self.rule {
            ValueRule::Pattern(p) if !p.compiled.is_match(value) => Err(ValueProblem::Pattern),
            ValueRule::Enum(values) if !values.iter().any(|v| v == value) => Err(ValueProblem::Enum),
            _ => Ok(()),
        }
    }

    /// The example `invocation.examples` uses: the first explicit one, else the smallest
    /// enum value.
    pub fn example(&self) -> Option<&str> {
        self.examples.first().map(String::as_str).or(match &self.rule {
            ValueRule::Enum(values) => values.iter().min().map(String::as_str),
            ValueRule::Pattern(_) => None,
        })
    }
}

impl HarpoonTemplate {
    /// The URL for `values` (each parameter's, already checked): the origin, the path
    /// with each value in its segment, and the query, form-encoded with sorted keys.
    pub fn render(&self, values: &BTreeMap<String, String>) -> String {
        self.render_with(|name| values.get(name).map(String::as_str).unwrap_or_default().to_owned())
    }

    fn render_with(&self, value: impl Fn(&str) -> String) -> String {
        let part = |p: &Part| match p {
            Part::Literal(text) => text.clone(),
            Part::Parameter(name) => value(name),
        };
        let mut url = self.origin.clone();
        if self.path.is_empty() {
            url.push('/');
        }
        for segment in &self.path {
            url.push('/');
            url.push_str(&part(segment));
        }
        for (i, (key, value)) in self.query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&rules::query_escape(key));
            url.push('=');
            url.push_str(&rules::query_escape(&part(value)));
        }
        url
    }

    /// The length of the longest URL accepted values can render.
    pub fn longest_url(&self) -> usize {
        self.render_with(|name| {
            let max = self
                .parameters
                .iter()
                .find(|p| p.name == name)
                .map_or(0, |p| p.max_length);
            "x".repeat(max)
        })
        .len()
    }

    pub fn parameter(&self, name: &str) -> Option<&TemplateParameter> {
        self.parameters.iter().find(|p| p.name == name)
    }
}

/// `^(?:...)$` of every reserved value, case-folded, for the schema's `not.pattern`.
pub(crate) fn reserved_pattern(values: &[String]) -> String {
    rules::case_folded_alternatives(values)
}

pub(super) use build::template;
