//! A template as written (`RawTemplate`) to a [`HarpoonTemplate`], or the first problem
//! with its key: `harpoon.targets[i].template.FIELD`.

use std::collections::{BTreeMap, BTreeSet};

use super::rules::{self, is_parameter_name, is_unreserved};
use super::{
    anchored, HarpoonTemplate, Part, TemplateParameter, TemplatePattern, ValueRule, MAX_HEADERS, MAX_HEADER_BYTES,
    MAX_PARAMETERS, MAX_URL_BYTES, TEMPLATE_VERSION,
};
use crate::config::error::ConfigError;
use crate::config::layers::EnvVars;
use crate::config::raw::{RawParameter, RawTemplate};
use crate::config::secret::Secret;

/// The most query keys, reserved values, enum values and examples.
const MAX_QUERY_KEYS: usize = 32;
const MAX_LISTED: usize = 64;
const MAX_EXAMPLES: usize = 8;
/// The managed `User-Agent`'s share of [`MAX_HEADER_BYTES`] (`User-Agent: tunnelgate/V`).
const USER_AGENT_BYTES: usize = 64;

/// Where a template's problems are reported.
struct Keys(usize);

impl Keys {
    fn at(&self, field: &str) -> String {
        format!("harpoon.targets[{}].template.{field}", self.0)
    }

    fn bad(&self, field: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.at(field), problem)
    }
}

/// Validates target `index`'s template (`label` and `description` already checked).
pub(in crate::config) fn template(
    index: usize,
    label: String,
    description: String,
    raw: RawTemplate,
    allow_plaintext: bool,
    env: &EnvVars,
) -> Result<HarpoonTemplate, ConfigError> {
    let keys = Keys(index);
    let version = raw.version.unwrap_or(i64::from(TEMPLATE_VERSION));
    if version != i64::from(TEMPLATE_VERSION) {
        return Err(keys.bad("version", format!("must be {TEMPLATE_VERSION} (found {version})")));
    }
    let method = raw.method.unwrap_or_else(|| "GET".into());
    if method != "GET" {
        return Err(keys.bad("method", format!("templates make GET requests only (found {method:?})")));
    }
    if raw.follow_redirects == Some(true) {
        return Err(keys.bad(
            "follow_redirects",
            "templates never follow redirects; leave it out or set false",
        ));
    }
    let origin = origin(&keys, raw.origin.as_deref(), allow_plaintext)?;
    let parameters = parameters(&keys, raw.parameters.unwrap_or_default())?;
    let mut used = BTreeSet::new();
    let path = path(
        &keys,
        raw.path_template.as_deref().unwrap_or_default(),
        &parameters,
        &mut used,
    )?;
    let query = query(&keys, raw.query.unwrap_or_default(), &parameters, &mut used)?;
    if let Some(unused) = parameters.iter().find(|p| !used.contains(&p.name)) {
        return Err(keys.bad(
            &format!("parameters.{}", unused.name),
            "is used in neither path_template nor query",
        ));
    }
    let (headers, allowed_headers) = headers(&keys, raw.headers.unwrap_or_default(), raw.allowed_headers, env)?;
    let template = HarpoonTemplate {
        label,
        description,
        version: TEMPLATE_VERSION,
        origin,
        path,
        query,
        parameters,
        headers,
        allowed_headers,
    };
    let longest = template.longest_url();
    if longest > MAX_URL_BYTES {
        return Err(keys.bad(
            "path_template",
            format!("the longest URL the parameters' max_length allow is {longest} bytes, over the limit of {MAX_URL_BYTES}"),
        ));
    }
    check_examples(&keys, &template)?;
    Ok(template)
}

fn origin(keys: &Keys, raw: Option<&str>, allow_plaintext: bool) -> Result<String, ConfigError> {
    let raw = raw.unwrap_or_default();
    let bad = |problem: &str| keys.bad("origin", format!("{problem}; write https://host[:port]"));
    let Ok(url) = url::Url::parse(raw) else {
        return Err(bad("is not a URL"));
    };
    match url.scheme() {
        "https" => {}
        "http" if allow_plaintext => {}
        "http" => return Err(bad("is plaintext http and harpoon.allow_plaintext_http is false")),
        _ => return Err(bad("must be an https URL")),
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(bad("has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry credentials"));
    }
    if url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || raw.trim_end_matches('/').ends_with(['?', '#'])
    {
        return Err(bad(
            "must not carry a path, query or fragment (put them in path_template and query)",
        ));
    }
    if raw.ends_with(':') || url.port() == Some(0) {
        return Err(bad("has an empty or zero port"));
    }
    Ok(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

fn parameters(keys: &Keys, raw: BTreeMap<String, RawParameter>) -> Result<Vec<TemplateParameter>, ConfigError> {
    if raw.is_empty() || raw.len() > MAX_PARAMETERS {
        return Err(keys.bad(
            "parameters",
            format!("must declare 1 to {MAX_PARAMETERS} parameters (found {})", raw.len()),
        ));
    }
    raw.into_iter().map(|(name, p)| parameter(keys, name, p)).collect()
}

fn parameter(keys: &Keys, name: String, raw: RawParameter) -> Result<TemplateParameter, ConfigError> {
    let field = |f: &str| format!("parameters.{name}.{f}");
    if !is_parameter_name(&name) {
        return Err(keys.bad(
            &format!("parameters.{name}"),
            "the name must match ^[A-Za-z][A-Za-z0-9_]{0,63}$",
        ));
    }
    if raw.kind.as_deref() != Some("string") {
        return Err(keys.bad(&field("type"), "must be \"string\" (the only type a template takes)"));
    }
    if raw.required != Some(true) {
        return Err(keys.bad(
            &field("required"),
            "must be true (every template parameter is required)",
        ));
    }
    let Some(max_length) = raw.max_length.filter(|m| (1..=256).contains(m)) else {
        return Err(keys.bad(&field("max_length"), "is required, 1 to 256"));
    };
    let min_length = raw.min_length.unwrap_or(1);
    if !(1..=max_length).contains(&min_length) {
        return Err(keys.bad(&field("min_length"), format!("must be 1 to max_length ({max_length})")));
    }
    let rule = rule(keys, &name, raw.pattern, raw.one_of)?;
    let reserved_values = raw.reserved_values.unwrap_or_default();
    let mut folded = BTreeSet::new();
    if reserved_values.len() > MAX_LISTED
        || reserved_values
            .iter()
            .any(|v| !rules::is_segment_value(v) || v.is_empty() || !folded.insert(v.to_ascii_lowercase()))
    {
        return Err(keys.bad(
            &field("reserved_values"),
            format!("takes at most {MAX_LISTED} distinct values (without regard to case), each of A-Z a-z 0-9 _ - . ~"),
        ));
    }
    let description = raw.description.unwrap_or_default();
    if description.len() > 1024 {
        return Err(keys.bad(&field("description"), "must be at most 1024 bytes"));
    }
    let examples = raw.examples.unwrap_or_default();
    if examples.len() > MAX_EXAMPLES || examples.iter().collect::<BTreeSet<_>>().len() != examples.len() {
        return Err(keys.bad(
            &field("examples"),
            format!("takes at most {MAX_EXAMPLES} distinct values"),
        ));
    }
    Ok(TemplateParameter {
        name,
        rule,
        min_length: usize::try_from(min_length).unwrap_or(1),
        max_length: usize::try_from(max_length).unwrap_or(1),
        reserved_values,
        description,
        examples,
    })
}

fn rule(
    keys: &Keys,
    name: &str,
    pattern: Option<String>,
    one_of: Option<Vec<String>>,
) -> Result<ValueRule, ConfigError> {
    match (pattern, one_of) {
        (Some(source), None) => {
            let field = format!("parameters.{name}.pattern");
            if let Some(problem) = rules::pattern_problem(&source) {
                return Err(keys.bad(&field, problem));
            }
            let compiled = regex::RegexBuilder::new(&anchored(&source))
                .size_limit(1 << 20)
                .build()
                .map_err(|e| keys.bad(&field, format!("is not a valid regular expression: {e}")))?;
            Ok(ValueRule::Pattern(TemplatePattern { source, compiled }))
        }
        (None, Some(values)) => {
            let field = format!("parameters.{name}.enum");
            let unique: BTreeSet<&String> = values.iter().collect();
            if values.is_empty() || values.len() > MAX_LISTED || unique.len() != values.len() {
                return Err(keys.bad(&field, format!("takes 1 to {MAX_LISTED} distinct values")));
            }
            if let Some(bad) = values.iter().find(|v| !rules::is_segment_value(v) || v.is_empty()) {
                return Err(keys.bad(&field, format!("{bad:?} is not of A-Z a-z 0-9 _ - . ~ (or is . or ..)")));
            }
            Ok(ValueRule::Enum(values))
        }
        (Some(_), Some(_)) => Err(keys.bad(&format!("parameters.{name}"), "takes pattern or enum, not both")),
        (None, None) => Err(keys.bad(&format!("parameters.{name}"), "needs a pattern or an enum")),
    }
}

/// The path's segments: each a literal of the unreserved set (not `.`/`..`) or exactly
/// one `{param}`; empty segments only in `/` itself.
fn path(
    keys: &Keys,
    raw: &str,
    parameters: &[TemplateParameter],
    used: &mut BTreeSet<String>,
) -> Result<Vec<Part>, ConfigError> {
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(keys.bad(
            "path_template",
            "must start with `/` (for example \"/casestatus/{case_id}\")",
        ));
    };
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    rest.split('/')
        .map(|segment| {
            let part = placeholder_or_literal(segment, parameters, used)
                .map_err(|problem| keys.bad("path_template", format!("the segment {segment:?} {problem}")))?;
            if matches!(&part, Part::Literal(l) if l.is_empty() || l == "." || l == "..") {
                return Err(keys.bad("path_template", "has an empty, `.` or `..` segment"));
            }
            Ok(part)
        })
        .collect()
}

fn placeholder_or_literal(
    text: &str,
    parameters: &[TemplateParameter],
    used: &mut BTreeSet<String>,
) -> Result<Part, String> {
    if let Some(name) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        if !parameters.iter().any(|p| p.name == name) {
            return Err(format!("names {{{name}}}, which is not a declared parameter"));
        }
        if !used.insert(name.to_owned()) {
            return Err(format!("uses {{{name}}} a second time; each parameter has one place"));
        }
        return Ok(Part::Parameter(name.to_owned()));
    }
    if text.contains(['{', '}']) || !is_unreserved(text) {
        return Err("must be a whole {parameter} or of A-Z a-z 0-9 _ - . ~".into());
    }
    Ok(Part::Literal(text.to_owned()))
}

fn query(
    keys: &Keys,
    raw: BTreeMap<String, String>,
    parameters: &[TemplateParameter],
    used: &mut BTreeSet<String>,
) -> Result<Vec<(String, Part)>, ConfigError> {
    if raw.len() > MAX_QUERY_KEYS {
        return Err(keys.bad("query", format!("takes at most {MAX_QUERY_KEYS} keys")));
    }
    raw.into_iter()
        .map(|(key, value)| {
            let field = format!("query.{key}");
            if key.is_empty() || key.len() > 64 || !is_unreserved(&key) || key == "." || key == ".." {
                return Err(keys.bad(&field, "the key must be 1 to 64 of A-Z a-z 0-9 _ - . ~"));
            }
            let part = if value.starts_with('{') || value.ends_with('}') {
                placeholder_or_literal(&value, parameters, used).map_err(|p| keys.bad(&field, p))?
            } else {
                if value.len() > 256 || value.chars().any(char::is_control) || value.contains(['{', '}']) {
                    return Err(keys.bad(
                        &field,
                        "a fixed value is at most 256 bytes, without control characters or braces",
                    ));
                }
                Part::Literal(value)
            };
            Ok((key, part))
        })
        .collect()
}

type Headers = (Vec<(String, Secret)>, Vec<String>);

fn headers(
    keys: &Keys,
    fixed: BTreeMap<String, String>,
    allowed: Option<Vec<String>>,
    env: &EnvVars,
) -> Result<Headers, ConfigError> {
    let mut names = BTreeSet::new();
    let mut resolved = Vec::new();
    let mut bytes = USER_AGENT_BYTES;
    for (name, reference) in fixed {
        let key = keys.at(&format!("headers.{name}"));
        if !rules::is_header_token(&name) || rules::is_routing_or_identity(&name) {
            return Err(ConfigError::invalid(
                key,
                "is not a header name a template may send (routing, forwarding and identity headers are refused)",
            ));
        }
        if !names.insert(name.to_ascii_lowercase()) {
            return Err(ConfigError::invalid(
                key,
                "is given twice (names compare without regard to case)",
            ));
        }
        let secret = Secret::resolve(&key, &reference, env)?;
        bytes += name.len() + secret.expose().len();
        resolved.push((rules::canonical_header(&name), secret));
    }
    let mut allowed_headers = Vec::new();
    for (i, name) in allowed.unwrap_or_default().into_iter().enumerate() {
        let key = format!("allowed_headers[{i}]");
        if !rules::is_header_token(&name) || rules::is_routing_or_identity(&name) || rules::names_a_credential(&name) {
            return Err(keys.bad(
                &key,
                format!(
                    "{name:?} may not come from a caller: routing, identity and credential headers belong in headers"
                ),
            ));
        }
        if !names.insert(name.to_ascii_lowercase()) {
            return Err(keys.bad(&key, format!("{name:?} is named twice, or is also a fixed header")));
        }
        allowed_headers.push(rules::canonical_header(&name));
    }
    allowed_headers.sort();
    if names.len() > MAX_HEADERS {
        return Err(keys.bad(
            "headers",
            format!("fixed and allowed headers together are at most {MAX_HEADERS}"),
        ));
    }
    if bytes > MAX_HEADER_BYTES {
        return Err(keys.bad(
            "headers",
            format!("the fixed headers are over {MAX_HEADER_BYTES} bytes with the User-Agent"),
        ));
    }
    Ok((resolved, allowed_headers))
}

fn check_examples(keys: &Keys, template: &HarpoonTemplate) -> Result<(), ConfigError> {
    for p in &template.parameters {
        if let Some((example, problem)) = p
            .examples
            .iter()
            .find_map(|e| p.check(e).err().map(|problem| (e, problem)))
        {
            return Err(keys.bad(
                &format!("parameters.{}.examples", p.name),
                format!("the example {example:?} {}", problem.words()),
            ));
        }
    }
    Ok(())
}
