//! What callers see of a template: its `list_targets` entry (`template_version`,
//! `parameters_schema`, `invocation`), the `call_target_template` tool, and the
//! template-aware `list_targets` output schema, shaped as upstream's (keys inside
//! schemas sorted, as Go writes maps). Never the origin, the path or query templates,
//! fixed query values or fixed headers.
//!
//! Pure.

use serde_json::{json, Map, Value};

use super::super::call::TIMEOUT_MS;
use super::super::registry::LABEL_PATTERN;
use crate::config::{HarpoonTemplate, TemplateParameter, ValueRule, TEMPLATE_MAX_HEADERS};

const INPUT_DESCRIPTION: &str =
    "Arguments of call_target_template for this target: its label and every parameter parameters_schema declares.";
/// A caller header value's schema.
fn header_value() -> Value {
    json!({"maxLength": 8192, "not": {"pattern": "[\u{0}-\u{1f}\u{7f}]"}, "type": "string"})
}

/// One `list_targets` entry, in upstream's field order.
pub(crate) fn entry(template: &HarpoonTemplate, limit: u64) -> Value {
    let mut e = Map::new();
    e.insert("template_version".into(), json!(template.version));
    e.insert("parameters_schema".into(), parameters_schema(template));
    e.insert("invocation".into(), invocation(template, limit));
    e.insert("label".into(), json!(template.label));
    e.insert("description".into(), json!(template.description));
    e.insert("category".into(), json!("config"));
    e.insert("source".into(), json!("config"));
    e.insert("tags".into(), json!([]));
    e.insert("allowed_methods".into(), json!(["GET"]));
    Value::Object(e)
}

/// The parameters as a JSON Schema object: each a string of its lengths, of the
/// unreserved set and not `.`/`..`, matching its anchored pattern or its enum, and not
/// one of its reserved values in any case.
pub(crate) fn parameters_schema(template: &HarpoonTemplate) -> Value {
    let properties: Map<String, Value> = template
        .parameters
        .iter()
        .map(|p| (p.name.clone(), parameter_schema(p)))
        .collect();
    let mut required: Vec<&str> = template.parameters.iter().map(|p| p.name.as_str()).collect();
    required.sort_unstable();
    json!({"additionalProperties": false, "properties": properties, "required": required, "type": "object"})
}

fn parameter_schema(p: &TemplateParameter) -> Value {
    let mut s = Map::new();
    s.insert(
        "allOf".into(),
        json!([{"not": {"pattern": "[^A-Za-z0-9_.~-]"}}, {"not": {"enum": [".", ".."]}}]),
    );
    if !p.description.is_empty() {
        s.insert("description".into(), json!(p.description));
    }
    if let ValueRule::Enum(values) = &p.rule {
        s.insert("enum".into(), json!(values));
    }
    if !p.examples.is_empty() {
        s.insert("examples".into(), json!(p.examples));
    }
    s.insert("maxLength".into(), json!(p.max_length));
    s.insert("minLength".into(), json!(p.min_length));
    if !p.reserved_values.is_empty() {
        s.insert(
            "not".into(),
            json!({"pattern": crate::config::reserved_pattern(&p.reserved_values)}),
        );
    }
    if let ValueRule::Pattern(pattern) = &p.rule {
        s.insert("pattern".into(), json!(pattern.anchored()));
    }
    s.insert("type".into(), json!("string"));
    Value::Object(s)
}

fn invocation(template: &HarpoonTemplate, limit: u64) -> Value {
    let mut out = Map::new();
    out.insert("tool_name".into(), json!("call_target_template"));
    out.insert("input_schema".into(), input_schema(template, limit));
    if let Some(example) = example(template) {
        out.insert("examples".into(), json!([example]));
    }
    Value::Object(out)
}

/// One example call when every parameter has an example and the example is accepted.
fn example(template: &HarpoonTemplate) -> Option<Value> {
    let mut parameters = Map::new();
    for p in &template.parameters {
        let value = p.example()?;
        p.check(value).ok()?;
        parameters.insert(p.name.clone(), json!(value));
    }
    Some(json!({"label": template.label, "parameters": parameters}))
}

/// The exact input schema of a call to this template.
pub(crate) fn input_schema(template: &HarpoonTemplate, limit: u64) -> Value {
    let (min_t, max_t, default_t) = TIMEOUT_MS;
    let headers: Map<String, Value> = template
        .allowed_headers
        .iter()
        .map(|h| (h.clone(), header_value()))
        .collect();
    let mut label = label_schema();
    label["const"] = json!(template.label);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "additionalProperties": false,
        "description": INPUT_DESCRIPTION,
        "properties": {
            "headers": {"additionalProperties": false, "default": {}, "maxProperties": TEMPLATE_MAX_HEADERS,
                        "properties": headers, "type": "object"},
            "label": sorted(label),
            "max_response_bytes": {"default": limit, "maximum": limit, "minimum": 1, "type": "integer"},
            "parameters": parameters_schema(template),
            "timeout_ms": {"default": default_t, "maximum": max_t, "minimum": min_t, "type": "integer"},
        },
        "required": ["label", "parameters"],
        "type": "object",
    })
}

fn label_schema() -> Value {
    json!({"maxLength": 64, "minLength": 1, "pattern": LABEL_PATTERN, "type": "string"})
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        other => other,
    }
}

/// The `call_target_template` tool as `tools/list` shows it (generic: every template's
/// exact schema is in its `list_targets` entry).
pub(crate) fn tool(limit: u64, output_schema: Value) -> Value {
    let (min_t, max_t, default_t) = TIMEOUT_MS;
    json!({
        "name": "call_target_template",
        "title": "Call Harpoon target template",
        "description": "Call a Harpoon target template by label with the parameters its list_targets entry declares (parameters_schema). Makes one GET to a fixed destination; never follows redirects.",
        "annotations": {"idempotentHint": true, "readOnlyHint": true},
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "additionalProperties": false,
            "properties": {
                "headers": {"additionalProperties": header_value(), "default": {}, "maxProperties": TEMPLATE_MAX_HEADERS, "type": "object"},
                "label": label_schema(),
                "max_response_bytes": {"default": limit, "maximum": limit, "minimum": 1, "type": "integer"},
                "parameters": {"additionalProperties": {"type": "string"}, "maxProperties": 16, "minProperties": 1, "type": "object"},
                "timeout_ms": {"default": default_t, "maximum": max_t, "minimum": min_t, "type": "integer"},
            },
            "required": ["label", "parameters"],
            "type": "object",
        },
        "outputSchema": output_schema,
    })
}

/// `list_targets`' entry properties gain the template fields.
pub(crate) fn list_entry_properties(properties: &mut Map<String, Value>) {
    properties.insert("template_version".into(), json!({"type": "integer"}));
    properties.insert("parameters_schema".into(), json!({"type": "object"}));
    properties.insert(
        "invocation".into(),
        json!({"type": "object", "properties": {
            "tool_name": {"type": "string"}, "input_schema": {"type": "object"},
            "examples": {"type": "array", "items": {"type": "object"}}
        }}),
    );
}

/// `list_targets`' description when templates exist.
pub(crate) const LIST_DESCRIPTION: &str = "List available Harpoon targets by label. Entries with template_version and parameters_schema are templates: call them with call_target_template and every declared parameter.";
