//! The arguments of one `call_target_template`, checked as upstream checks them (by the
//! handler itself, never `-32602`): the raw JSON first (size, nesting, duplicate keys),
//! then the shape, the label, the parameters against their template, the caller's
//! headers and the limits. Every refusal is the tool error's text, and nothing is sent.
//!
//! Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::config::{
    canonical_header, is_header_token, is_routing_or_identity, names_a_credential, HarpoonTemplate,
    TEMPLATE_MAX_HEADERS, TEMPLATE_MAX_HEADER_BYTES, TEMPLATE_MAX_URL_BYTES,
};

use super::super::call::TIMEOUT_MS;

/// The largest `arguments` upstream reads, in bytes.
const MAX_ARGUMENT_BYTES: usize = 32_768;
/// The deepest nesting of `arguments` (the object itself is 1).
const MAX_DEPTH: usize = 4;
/// The keys `arguments` may have, spelled exactly.
const KEYS: [&str; 5] = ["label", "parameters", "headers", "timeout_ms", "max_response_bytes"];
/// The longest caller header value.
const MAX_HEADER_VALUE: usize = 8192;

/// A refusal: the label to name (`unknown` when it is not a template's) and the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) label: Option<String>,
    pub(crate) message: String,
}

impl Refusal {
    fn unknown(message: &str) -> Self {
        Self {
            label: None,
            message: message.to_owned(),
        }
    }

    fn of(label: &str, message: impl Into<String>) -> Self {
        Self {
            label: Some(label.to_owned()),
            message: message.into(),
        }
    }
}

/// One checked call: the template's index, the URL to `GET`, the headers to send (the
/// caller's, then the fixed ones) and the limits.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) index: usize,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) max_bytes: u64,
}

/// Reads the raw `arguments`: at most 32 KiB, one value, no duplicate key, nested at
/// most 4 deep, an object of the known keys with a well-formed label, `parameters` an
/// object, string header values and integer limits.
pub(crate) fn parse(raw: Option<&str>) -> Result<Map<String, Value>, Refusal> {
    let invalid = || Refusal::unknown("invalid template arguments");
    let raw = raw.ok_or_else(invalid)?;
    if raw.len() > MAX_ARGUMENT_BYTES {
        return Err(invalid());
    }
    let mut de = serde_json::Deserializer::from_str(raw);
    let value = Strict(1).deserialize(&mut de).map_err(|_| invalid())?;
    de.end().map_err(|_| invalid())?;
    let Value::Object(args) = value else {
        return Err(invalid());
    };
    if args.keys().any(|k| !KEYS.contains(&k.as_str())) {
        return Err(invalid());
    }
    let label_ok = args
        .get("label")
        .and_then(Value::as_str)
        .is_some_and(super::super::registry::valid_label);
    let headers_ok = match args.get("headers") {
        None => true,
        Some(Value::Object(h)) => h.values().all(Value::is_string),
        Some(_) => false,
    };
    if !label_ok || !headers_ok || !args.get("parameters").is_some_and(Value::is_object) {
        return Err(invalid());
    }
    for key in ["timeout_ms", "max_response_bytes"] {
        if args.get(key).is_some_and(|v| !v.is_i64() && !v.is_u64()) {
            return Err(invalid());
        }
    }
    Ok(args)
}

/// Checks `args` (from [`parse`]) against `template` (number `index`).
pub(crate) fn check(
    index: usize,
    template: &HarpoonTemplate,
    args: &Map<String, Value>,
    limit: u64,
    user_agent: &str,
) -> Result<Checked, Refusal> {
    let label = template.label.as_str();
    let values = parameters(template, args)?;
    let url = template.render(&values);
    if url.len() > TEMPLATE_MAX_URL_BYTES {
        return Err(Refusal::of(label, "rendered URL exceeds size limit"));
    }
    let headers = headers(template, args, user_agent)?;
    let (timeout, max_bytes) = limits(label, args, limit)?;
    Ok(Checked {
        index,
        url,
        headers,
        timeout,
        max_bytes,
    })
}

fn parameters(template: &HarpoonTemplate, args: &Map<String, Value>) -> Result<BTreeMap<String, String>, Refusal> {
    let label = template.label.as_str();
    let given = args
        .get("parameters")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let declared: BTreeSet<&str> = template.parameters.iter().map(|p| p.name.as_str()).collect();
    if given.len() != declared.len() || given.keys().any(|k| !declared.contains(k.as_str())) {
        return Err(Refusal::of(
            label,
            "template parameter keys must match the declared schema",
        ));
    }
    let mut values = BTreeMap::new();
    for p in &template.parameters {
        let Some(value) = given.get(&p.name).and_then(Value::as_str) else {
            return Err(Refusal::of(
                label,
                format!("template parameter {} must be a string", p.name),
            ));
        };
        p.check(value)
            .map_err(|problem| Refusal::of(label, format!("template parameter {}: {}", p.name, problem.words())))?;
        values.insert(p.name.clone(), value.to_owned());
    }
    Ok(values)
}

fn headers(
    template: &HarpoonTemplate,
    args: &Map<String, Value>,
    user_agent: &str,
) -> Result<Vec<(String, String)>, Refusal> {
    let label = template.label.as_str();
    let given = args
        .get("headers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut bytes = "User-Agent".len() + user_agent.len();
    for (name, value) in &given {
        let value = value.as_str().unwrap_or_default();
        if !is_header_token(name) || names_a_credential(name) {
            return Err(Refusal::of(label, "invalid or forbidden template header name"));
        }
        if is_routing_or_identity(name) {
            return Err(Refusal::of(
                label,
                "routing and identity headers are forbidden for templates",
            ));
        }
        let canonical = canonical_header(name);
        if !template.allowed_headers.contains(&canonical) {
            return Err(Refusal::of(label, "caller header is not permitted by the target"));
        }
        if !seen.insert(canonical.clone()) {
            return Err(Refusal::of(label, "duplicate caller header name"));
        }
        // The schema's rule exactly: no C0 control character and no DEL.
        if value.len() > MAX_HEADER_VALUE || value.chars().any(|c| c < ' ' || c == '\u{7f}') {
            return Err(Refusal::of(label, "invalid caller header value"));
        }
        bytes += canonical.len() + value.len();
        out.push((canonical, value.to_owned()));
    }
    if out.len() + template.headers.len() > TEMPLATE_MAX_HEADERS {
        return Err(Refusal::of(label, "too many template headers"));
    }
    for (name, secret) in &template.headers {
        bytes += name.len() + secret.expose().len();
        out.push((name.clone(), secret.expose().to_owned()));
    }
    if bytes > TEMPLATE_MAX_HEADER_BYTES {
        return Err(Refusal::of(label, "template headers exceed size limit"));
    }
    Ok(out)
}

fn limits(label: &str, args: &Map<String, Value>, limit: u64) -> Result<(Duration, u64), Refusal> {
    let (min_t, max_t, default_t) = TIMEOUT_MS;
    // An integer beyond i64 (parse let only integers through) is over the bound.
    let timeout = args
        .get("timeout_ms")
        .map_or(default_t, |v| v.as_i64().unwrap_or(i64::MAX));
    if timeout <= 0 {
        return Err(Refusal::of(label, "timeout must be positive"));
    }
    if timeout < min_t {
        return Err(Refusal::of(label, format!("timeout must be at least {min_t}ms")));
    }
    if timeout > max_t {
        return Err(Refusal::of(label, format!("timeout must be at most {max_t}ms")));
    }
    let max_bytes = match args.get("max_response_bytes") {
        None => i128::from(limit),
        Some(v) => v.as_i64().map(i128::from).unwrap_or(i128::MAX),
    };
    if max_bytes <= 0 {
        return Err(Refusal::of(label, "max_response_bytes must be positive"));
    }
    if max_bytes > i128::from(limit) {
        return Err(Refusal::of(
            label,
            format!("max_response_bytes must be less than or equal to {limit}"),
        ));
    }
    let timeout = Duration::from_millis(u64::try_from(timeout).unwrap_or_default());
    Ok((timeout, u64::try_from(max_bytes).unwrap_or(limit)))
}

/// A JSON value read at nesting `self.0`, refusing a duplicate key anywhere and nesting
/// deeper than [`MAX_DEPTH`].
struct Strict(usize);

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.0 > MAX_DEPTH {
            return Err(serde::de::Error::custom("nested too deeply"));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict(self.0 + 1))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.0 > MAX_DEPTH {
            return Err(serde::de::Error::custom("nested too deeply"));
        }
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Strict(self.0 + 1))?;
            if out.insert(key, value).is_some() {
                return Err(serde::de::Error::custom("duplicate key"));
            }
        }
        Ok(Value::Object(out))
    }
}
