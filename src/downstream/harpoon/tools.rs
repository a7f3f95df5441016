//! The tools of the Harpoon MCP server: their definitions as `tools/list` shows them
//! (upstream's names, titles, annotations and input schemas, bounded by the
//! configuration) and the check of a call's `arguments` against those schemas, with
//! upstream's `-32602` wording, before anything else runs.
//!
//! Pure.

use serde_json::{json, Map, Value};

use super::call::TIMEOUT_MS;
use super::registry::LABEL_PATTERN;

const ID_BASE: &str = "https://github.com/openai/tunnel-client/pkg";
const HEADER_NAME_PATTERN: &str = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

/// The configured limits the schemas are built from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_response_bytes: u64,
    pub(crate) max_redirects: u64,
}

/// The tools, sorted by name: `call_target_template` only when `templates` exist, and
/// then `list_targets` shows their fields; without templates the list is exactly
/// upstream's three.
pub(crate) fn list(limits: Limits, templates: &[crate::config::HarpoonTemplate]) -> Value {
    let call_output = call_output_schema(&format!("{ID_BASE}/runtimeharpoon/call-target-response"), true);
    let mut entry_properties = json!({
        "label": {"type": "string"}, "description": {"type": "string"},
        "category": {"type": "string"}, "source": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "allowed_methods": {"type": "array", "items": {"type": "string"}}
    });
    let mut list_description = "List available Harpoon targets by label.";
    if !templates.is_empty() {
        if let Some(p) = entry_properties.as_object_mut() {
            super::template::schema::list_entry_properties(p);
        }
        list_description = super::template::schema::LIST_DESCRIPTION;
    }
    let mut tools = vec![json!({
        "name": "call_target",
        "title": "Call Harpoon target",
        "description": "Call an allowlisted HTTP target by label.",
        "annotations": {"openWorldHint": true},
        "inputSchema": call_target_schema(limits),
        "outputSchema": call_output,
    })];
    if !templates.is_empty() {
        let output = call_output_schema(
            &format!("{ID_BASE}/runtimeharpoon/call-target-template-response"),
            false,
        );
        tools.push(super::template::schema::tool(limits.max_response_bytes, output));
    }
    tools.push(json!({
        "name": "get_oauth_target_audience",
        "title": "Get OAuth target audience",
        "description": "Resolve the exact private_key_jwt audience for an OAuth token endpoint target.",
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
        "inputSchema": audience_schema(),
        "outputSchema": object_schema(&format!("{ID_BASE}/harpoon/oauth-target-audience-response"),
            json!({"audience": {"type": "string"}}), &["audience"]),
    }));
    tools.push(json!({
        "name": "list_targets",
        "title": "List Harpoon targets",
        "description": list_description,
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
        "inputSchema": list_targets_schema(),
        "outputSchema": object_schema(&format!("{ID_BASE}/runtimeharpoon/list-targets-response"), json!({
            "targets": {"type": "array", "items": {"type": "object", "properties": entry_properties}}
        }), &["targets"]),
    }));
    json!({"tools": tools})
}

/// `call_target`'s result schema; a template's result has no `truncated` (a body over
/// the limit is an error), so it is not required there.
fn call_output_schema(id: &str, truncated: bool) -> Value {
    let mut properties = json!({
        "status_code": {"type": "integer"},
        "headers": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        "body_base64": {"type": "string"},
        "body_size_bytes": {"type": "integer"},
        "truncated": {"type": "boolean"}
    });
    if truncated {
        return object_schema(id, properties, &["status_code", "body_size_bytes", "truncated"]);
    }
    if let Some(p) = properties.as_object_mut() {
        p.shift_remove("truncated");
    }
    object_schema(id, properties, &["status_code", "body_size_bytes"])
}

fn object_schema(id: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": id,
        "type": "object",
        "additionalProperties": false,
        "properties": properties,
        "required": required,
    })
}

fn label_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": LABEL_PATTERN})
}

pub(crate) fn call_target_schema(limits: Limits) -> Value {
    let (min_t, max_t, default_t) = TIMEOUT_MS;
    object_schema(
        &format!("{ID_BASE}/runtimeharpoon/call-target-request"),
        json!({
            "label": label_schema(),
            "method": {"type": "string", "enum": ["GET", "POST", "PUT"]},
            "headers": {"type": "object", "propertyNames": {"pattern": HEADER_NAME_PATTERN},
                        "additionalProperties": {"type": "string"}, "default": {}},
            "body": {"type": "string"},
            "timeout_ms": {"type": "integer", "minimum": min_t, "maximum": max_t, "default": default_t},
            "max_response_bytes": {"type": "integer", "minimum": 1, "maximum": limits.max_response_bytes,
                                   "default": limits.max_response_bytes},
            "follow_redirects": {"type": "boolean", "default": true},
            "max_redirects": {"type": "integer", "minimum": 0, "maximum": limits.max_redirects,
                              "default": limits.max_redirects},
        }),
        &["label", "method"],
    )
}

pub(crate) fn list_targets_schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    object_schema(
        &format!("{ID_BASE}/runtimeharpoon/list-targets-request"),
        json!({"categories": strings, "sources": strings, "tags": strings}),
        &[],
    )
}

pub(crate) fn audience_schema() -> Value {
    object_schema(
        &format!("{ID_BASE}/harpoon/oauth-target-audience-request"),
        json!({"label": label_schema()}),
        &["label"],
    )
}

/// Checks `arguments` against `schema` (the subset of JSON Schema the three schemas
/// use) and returns them with the schema's defaults applied, or upstream's message.
pub(crate) fn validate(schema: &Value, arguments: Option<&Value>) -> Result<Map<String, Value>, String> {
    let id = schema["$id"].as_str().unwrap_or_default();
    let fail = |detail: String| format!("invalid params: validating \"arguments\": validating {id}: {detail}");
    let mut args = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            return Err(fail(format!(
                "type: {other} has type {}, want object",
                type_name(other)
            )))
        }
    };
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    let extra: Vec<&String> = args.keys().filter(|k| !properties.contains_key(*k)).collect();
    if !extra.is_empty() {
        let names: Vec<String> = extra.iter().map(|k| format!("{k:?}")).collect();
        return Err(fail(format!("unexpected additional properties [{}]", names.join(" "))));
    }
    let missing: Vec<String> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|name| !args.contains_key(*name))
        .map(|name| format!("{name:?}"))
        .collect();
    if !missing.is_empty() {
        return Err(fail(format!("required: missing properties: [{}]", missing.join(" "))));
    }
    for (name, rule) in &properties {
        match args.get(name) {
            Some(value) => check(&format!("/properties/{name}"), rule, value).map_err(fail)?,
            None => {
                if let Some(default) = rule.get("default") {
                    args.insert(name.clone(), default.clone());
                }
            }
        }
    }
    Ok(args)
}

fn check(path: &str, rule: &Value, value: &Value) -> Result<(), String> {
    let at = |detail: String| format!("validating {path}: {detail}");
    match rule["type"].as_str() {
        Some("string") => {
            let Some(s) = value.as_str() else {
                return Err(at(format!("type: {value} has type {}, want string", type_name(value))));
            };
            check_string(rule, s).map_err(at)
        }
        Some("integer") => {
            let Some(n) = value
                .as_i64()
                .or_else(|| value.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            else {
                return Err(at(format!("type: {value} has type {}, want integer", type_name(value))));
            };
            if let Some(min) = rule["minimum"].as_i64().filter(|min| n < *min) {
                return Err(at(format!("minimum: {n}/1 is less than {min}.000000")));
            }
            if let Some(max) = rule["maximum"].as_i64().filter(|max| n > *max) {
                return Err(at(format!("maximum: {n}/1 is greater than {max}.000000")));
            }
            Ok(())
        }
        Some("boolean") if !value.is_boolean() => {
            Err(at(format!("type: {value} has type {}, want boolean", type_name(value))))
        }
        Some("array") => {
            let Some(items) = value.as_array() else {
                return Err(at(format!("type: {value} has type {}, want array", type_name(value))));
            };
            for (i, item) in items.iter().enumerate() {
                check(&format!("{path}/items/{i}"), &rule["items"], item)
                    .map_err(|e| format!("validating {path}: {e}"))?;
            }
            Ok(())
        }
        Some("object") => check_object(path, rule, value),
        _ => Ok(()),
    }
}

fn check_string(rule: &Value, s: &str) -> Result<(), String> {
    let chars = s.chars().count();
    if let Some(min) = rule["minLength"].as_u64().filter(|min| (chars as u64) < *min) {
        return Err(format!(
            "minLength: {s:?} contains {chars} Unicode code points, fewer than {min}"
        ));
    }
    if let Some(max) = rule["maxLength"].as_u64().filter(|max| (chars as u64) > *max) {
        return Err(format!(
            "maxLength: {s:?} contains {chars} Unicode code points, more than {max}"
        ));
    }
    if let Some(values) = rule["enum"].as_array() {
        if !values.iter().any(|v| v.as_str() == Some(s)) {
            let names: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
            return Err(format!("enum: {s} does not equal any of: [{}]", names.join(" ")));
        }
    }
    if let Some(pattern) = rule["pattern"].as_str() {
        if !matches_pattern(pattern, s) {
            return Err(format!("pattern: {s:?} does not match regular expression {pattern:?}"));
        }
    }
    Ok(())
}

fn check_object(path: &str, rule: &Value, value: &Value) -> Result<(), String> {
    let Some(map) = value.as_object() else {
        return Err(format!(
            "validating {path}: type: {value} has type {}, want object",
            type_name(value)
        ));
    };
    for (name, item) in map {
        if let Some(pattern) = rule["propertyNames"]["pattern"].as_str() {
            if !matches_pattern(pattern, name) {
                return Err(format!(
                    "validating {path}: validating {path}/propertyNames: pattern: {name:?} does not match regular expression {pattern:?}"
                ));
            }
        }
        if !item.is_string() {
            return Err(format!(
                "validating {path}: validating {path}/additionalProperties: type: {item} has type {}, want string",
                type_name(item)
            ));
        }
    }
    Ok(())
}

/// The two patterns the schemas use, checked by hand (no regular-expression engine).
fn matches_pattern(pattern: &str, s: &str) -> bool {
    if pattern == LABEL_PATTERN {
        super::registry::valid_label(s)
    } else if pattern == HEADER_NAME_PATTERN {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&b))
    } else {
        true
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_response_bytes: 102_400,
        max_redirects: 5,
    };

    fn call(args: Value) -> Result<Map<String, Value>, String> {
        validate(&call_target_schema(LIMITS), Some(&args))
    }

    #[test]
    fn bad_arguments_get_upstreams_words() {
        let id = "https://github.com/openai/tunnel-client/pkg/runtimeharpoon/call-target-request";
        let prefix = format!("invalid params: validating \"arguments\": validating {id}: ");
        let cases = [
            (
                json!({"label":"a","method":"DELETE"}),
                "validating /properties/method: enum: DELETE does not equal any of: [GET POST PUT]",
            ),
            (
                json!({"label":"a","method":"GET","timeout_ms":50}),
                "validating /properties/timeout_ms: minimum: 50/1 is less than 100.000000",
            ),
            (
                json!({"label":"a","method":"GET","max_response_bytes":200000}),
                "validating /properties/max_response_bytes: maximum: 200000/1 is greater than 102400.000000",
            ),
            (
                json!({"label":"","method":"GET"}),
                "validating /properties/label: minLength: \"\" contains 0 Unicode code points, fewer than 1",
            ),
            (
                json!({"label":"a","method":"GET","path":"/x"}),
                "unexpected additional properties [\"path\"]",
            ),
            (json!({}), "required: missing properties: [\"label\" \"method\"]"),
        ];
        for (args, detail) in cases {
            assert_eq!(call(args).unwrap_err(), format!("{prefix}{detail}"));
        }
        let bad_header = call(json!({"label":"a","method":"GET","headers":{"bad header":"x"}})).unwrap_err();
        assert!(bad_header.contains("validating /properties/headers: validating /properties/headers/propertyNames: pattern: \"bad header\" does not match"), "{bad_header}");
        let padded = call(json!({"label":" oauth-token-endpoint-0 ","method":"GET"})).unwrap_err();
        assert!(padded.contains("pattern: \" oauth-token-endpoint-0 \" does not match regular expression \"^[a-z0-9][a-z0-9_-]{0,63}$\""), "{padded}");
    }

    #[test]
    fn defaults_are_applied_and_null_arguments_are_an_empty_object() {
        let args = call(json!({"label":"a","method":"POST"})).unwrap();
        assert_eq!(args["timeout_ms"], 30_000);
        assert_eq!(args["max_response_bytes"], 102_400);
        assert_eq!(args["follow_redirects"], true);
        assert_eq!(args["max_redirects"], 5);
        assert!(validate(&list_targets_schema(), Some(&Value::Null)).unwrap().is_empty());
        assert!(validate(&list_targets_schema(), None).unwrap().is_empty());
    }

    #[test]
    fn the_tools_are_sorted_and_bounded_by_the_configuration() {
        let tools = list(
            Limits {
                max_response_bytes: 1000,
                max_redirects: 2,
            },
            &[],
        );
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["call_target", "get_oauth_target_audience", "list_targets"]);
        let props = &tools["tools"][0]["inputSchema"]["properties"];
        assert_eq!(props["max_response_bytes"]["maximum"], 1000);
        assert_eq!(props["max_redirects"]["maximum"], 2);
    }
}
