//! `Mcp-Param-{Name}` headers (2026-07-28 `streamable-http` §Request Metadata) for a
//! handshake-era caller's `tools/call` to a 2026-07-28 server: which arguments of a tool
//! its `inputSchema` marks with `x-mcp-header`, read from the `tools/list` answers that
//! pass through the bridge, and each argument's value as a header value.
//!
//! The rules are the Python SDK 2.x's (`mcp/shared/inbound.py`): an annotation counts
//! only on a property reached from the root by `properties` keys alone, names an RFC 9110
//! token, sits on a `string`, `integer` or `boolean` property and is unique ignoring
//! case; a schema with one bad annotation gives its tool no headers at all. A value is
//! sent as is when it is printable ASCII without edge spaces, else as
//! `=?base64?<base64 of its UTF-8>?=`.
//!
//! Invariants:
//! - at most [`MAX_TOOLS`] tools are remembered per channel;
//! - a value is only ever put in a header, never in a log or an error.
//!
//! Nothing here does I/O or logs: the transport calls it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

/// The most tools a channel remembers annotations of. Only tools with at least one
/// `x-mcp-header` argument take a place; past the bound a tool is not remembered, so its
/// calls go without `Mcp-Param-*` headers (and the server's `-32020` reaches the caller).
pub(crate) const MAX_TOOLS: usize = 1024;

/// The JSON-RPC code of a 2026-07-28 server's header/body disagreement (HTTP 400).
pub(crate) const HEADER_MISMATCH: i64 = -32020;

/// The most `tools/list` pages the gateway reads to find a tool again after a
/// `-32020` (the SDK's `_RELIST_PAGE_CAP`): a pager that never ends cannot hold a call.
pub(crate) const RELIST_PAGES: usize = 100;

/// The schema annotation that names an argument's header.
const X_MCP_HEADER: &str = "x-mcp-header";

/// Where a `Mcp-Param-*` header's name starts.
const PREFIX: &str = "Mcp-Param-";

/// Applicators whose value is one subschema (off the `properties` chain).
const SUBSCHEMA_SINGLE: [&str; 11] = [
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Applicators whose value is a list of subschemas.
const SUBSCHEMA_LIST: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// Applicators whose value maps names to subschemas.
const SUBSCHEMA_MAP: [&str; 4] = ["patternProperties", "dependentSchemas", "$defs", "definitions"];

/// One argument a tool mirrors into a header: the `properties` keys from the schema's
/// root to it, and the header's name without the prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Annotated {
    path: Vec<String>,
    token: String,
}

/// What the channel's `tools/list` answers said, by tool name: the tools with at least
/// one valid annotation (at most [`MAX_TOOLS`]).
#[derive(Default)]
pub(crate) struct ParamHeaders {
    by_tool: Mutex<HashMap<String, Arc<[Annotated]>>>,
}

/// What one `tools/list` page said besides the annotations.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Page {
    /// The names of the tools it listed.
    pub(crate) names: Vec<String>,
    /// Where the listing goes on, if it does.
    pub(crate) next_cursor: Option<String>,
}

impl ParamHeaders {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[Annotated]>>> {
        self.by_tool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns from a `tools/list` answer (`json`, the whole message): a listing that is
    /// whole (`first`, its request had no cursor, and it names no next one) replaces what
    /// was known; a page of a longer one adds to it. `None` for anything but a listing
    /// (an error answer changes nothing).
    pub(crate) fn learn(&self, json: &str, first: bool) -> Option<Page> {
        let message: Value = serde_json::from_str(json).ok()?;
        let result = message.get("result")?;
        let tools = result.get("tools")?.as_array()?;
        let next_cursor = result.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        let mut page = HashMap::new();
        let mut names = Vec::new();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            names.push(name.to_owned());
            let annotated = tool.get("inputSchema").and_then(annotations).unwrap_or_default();
            page.insert(name.to_owned(), (!annotated.is_empty()).then(|| Arc::from(annotated)));
        }
        let mut known = self.lock();
        if first && next_cursor.is_none() {
            known.clear();
        }
        for (name, annotated) in page {
            match annotated {
                None => {
                    known.remove(&name);
                }
                Some(annotated) if known.len() < MAX_TOOLS || known.contains_key(&name) => {
                    known.insert(name, annotated);
                }
                Some(_) => {}
            }
        }
        Some(Page { names, next_cursor })
    }

    /// The `Mcp-Param-*` headers of a `tools/call` (`body`, the whole request): one per
    /// remembered annotation of the tool whose argument is present and renders.
    pub(crate) fn headers(&self, body: &str) -> Vec<(String, String)> {
        let Ok(message) = serde_json::from_str::<Value>(body) else {
            return Vec::new();
        };
        let Some(name) = message.pointer("/params/name").and_then(Value::as_str) else {
            return Vec::new();
        };
        let Some(annotated) = self.lock().get(name).cloned() else {
            return Vec::new();
        };
        let arguments = message.pointer("/params/arguments").unwrap_or(&Value::Null);
        annotated
            .iter()
            .filter_map(|a| {
                let value = render(value_at(arguments, &a.path)?)?;
                Some((format!("{PREFIX}{}", a.token), encode_header_value(&value)))
            })
            .collect()
    }
}

/// The annotated arguments of a tool's `inputSchema`, or `None` when an annotation is
/// invalid (the SDK's `find_invalid_x_mcp_header`: the tool then gets no headers).
pub(crate) fn annotations(schema: &Value) -> Option<Vec<Annotated>> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    // An explicit stack: any depth of schema is walked without recursion.
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), schema)];
    while let Some((path, node)) = stack.pop() {
        let Value::Object(node) = node else {
            continue;
        };
        if let Some(token) = node.get(X_MCP_HEADER) {
            let path = path.clone().filter(|p| !p.is_empty())?;
            let token = token.as_str().filter(|t| is_token(t))?;
            let typed = node.get("type").and_then(Value::as_str);
            if !matches!(typed, Some("string" | "integer" | "boolean")) {
                return None;
            }
            if !seen.insert(token.to_ascii_lowercase()) {
                return None;
            }
            found.push(Annotated {
                path,
                token: token.to_owned(),
            });
        }
        push_subschemas(&mut stack, path.as_deref(), node);
    }
    Some(found)
}

/// The schema positions under `node` (at `path`, `None` once off the `properties` chain).
fn push_subschemas<'a>(
    stack: &mut Vec<(Option<Vec<String>>, &'a Value)>,
    path: Option<&[String]>,
    node: &'a Map<String, Value>,
) {
    for (keyword, value) in node {
        match (keyword.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                for (name, sub) in properties {
                    let deeper = path.map(|p| [p, std::slice::from_ref(name)].concat());
                    stack.push((deeper, sub));
                }
            }
            (k, _) if SUBSCHEMA_SINGLE.contains(&k) => stack.push((None, value)),
            (k, Value::Array(subs)) if SUBSCHEMA_LIST.contains(&k) => stack.extend(subs.iter().map(|s| (None, s))),
            (k, Value::Object(subs)) if SUBSCHEMA_MAP.contains(&k) => stack.extend(subs.values().map(|s| (None, s))),
            _ => {}
        }
    }
}

/// An RFC 9110 token: what a header's name may be made of.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The value at `path` in the call's `arguments`; `None` when a step is missing or not
/// an object, or the value is `null` (the header is then left out).
fn value_at<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    let value = path
        .iter()
        .try_fold(arguments, |node, key| node.as_object()?.get(key))?;
    (!value.is_null()).then_some(value)
}

/// A value as its header text, as the SDK renders it: a string as it is, a boolean as
/// `true`/`false`, an integer in decimal, any other number as Python's `str(float)`;
/// `None` for arrays and objects (no header). An integer beyond 64 bits was read as a
/// float and renders as one.
pub(crate) fn render(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(n) if n.is_f64() => n.as_f64().map(python_float),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Python's `repr` of a float: the shortest digits that read back the same, fixed
/// notation (with `.0` when whole) for exponents from -4 to 15, else `<m>e±XX`.
fn python_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` writes a decimal exponent");
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    if !(-4..16).contains(&exp) {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exp_sign}{:02}", exp.unsigned_abs());
    }
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let point = exp + 1;
    match usize::try_from(point) {
        Err(_) | Ok(0) => format!("{sign}0.{}{digits}", "0".repeat(point.unsigned_abs() as usize)),
        Ok(point) if point >= digits.len() => format!("{sign}{digits}{}.0", "0".repeat(point - digits.len())),
        Ok(point) => format!("{sign}{}.{}", &digits[..point], &digits[point..]),
    }
}

/// A header value as the SDK's `encode_header_value` writes it: printable ASCII without
/// leading or trailing spaces as it is, anything else as `=?base64?<base64 of the
/// UTF-8>?=`. A value that starts and ends as the sentinel does is wrapped too (the
/// TypeScript SDK would read it as one), which the receiver decodes to the same text.
pub(crate) fn encode_header_value(value: &str) -> String {
    use base64::Engine as _;
    let printable = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let edges = value.trim_matches(' ') != value;
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    if printable && !edges && !sentinel {
        return value.to_owned();
    }
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
    )
}

/// Whether an answer (`json`, the whole message) is a 2026-07-28 server's `-32020`.
pub(crate) fn is_header_mismatch(json: &str) -> bool {
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|m| m.pointer("/error/code").and_then(Value::as_i64))
        == Some(HEADER_MISMATCH)
}

/// Whether a `tools/list` request (`body`) asks for the listing's first page.
pub(crate) fn first_page(body: &str) -> bool {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|m| m.pointer("/params/cursor").cloned())
        .is_none_or(|c| c.is_null())
}

/// The gateway's own `tools/list` (before stamping), from `cursor` if given.
pub(crate) fn relist_request(cursor: Option<&str>) -> String {
    let params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
    json!({"jsonrpc": "2.0", "id": "tunnelgate-tools-relist", "method": "tools/list", "params": params}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(schema: Value) -> Option<Vec<(String, String)>> {
        let mut found: Vec<_> = annotations(&schema)?
            .into_iter()
            .map(|a| (a.path.join("."), a.token))
            .collect();
        found.sort();
        Some(found)
    }

    #[test]
    fn annotations_on_the_properties_chain_are_found_at_any_depth() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "plain": {"type": "string"},
            "outer": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
        }});
        let want = [("flag", "Flag"), ("outer.n", "N"), ("region", "Region")];
        let want: Vec<_> = want.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        assert_eq!(tokens(schema), Some(want));
        assert_eq!(tokens(json!({"type": "object"})), Some(vec![]));
        assert_eq!(tokens(json!(null)), Some(vec![]));
    }

    #[test]
    fn an_invalid_annotation_gives_the_tool_no_headers() {
        let cases = [
            json!({"x-mcp-header": "Root", "type": "string"}),
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": ["string"], "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": 7}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
            json!({"$defs": {"d": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}}),
        ];
        for schema in cases {
            assert_eq!(tokens(schema.clone()), None, "{schema}");
        }
        let data = json!({"properties": {"a": {"type": "string", "default": {"x-mcp-header": "A"}}}});
        assert_eq!(tokens(data), Some(vec![]), "instance data is not a schema");
    }

    #[test]
    fn values_render_and_encode_as_the_sdk_s_codec_does() {
        let cases = [
            (json!("eu-west"), "eu-west"),
            (json!("Zürich"), "=?base64?WsO8cmljaA==?="),
            (json!(" padded"), "=?base64?IHBhZGRlZA==?="),
            (json!("line\nbreak"), "=?base64?bGluZQpicmVhaw==?="),
            (json!("=?base64?eA==?="), "=?base64?PT9iYXNlNjQ/ZUE9PT89?="),
            (json!("=?base64?="), "=?base64?PT9iYXNlNjQ/PQ==?="),
            (json!("=?plain"), "=?plain"),
            (json!(""), ""),
            (json!(true), "true"),
            (json!(false), "false"),
            (json!(42), "42"),
            (json!(-7), "-7"),
            (json!(18_446_744_073_709_551_615_u64), "18446744073709551615"),
            (json!(42.0), "42.0"),
            (json!(1.5), "1.5"),
            (json!(-0.0), "-0.0"),
            (json!(0.0001), "0.0001"),
            (json!(0.00001), "1e-05"),
            (json!(1.5e-7), "1.5e-07"),
            (json!(1e15), "1000000000000000.0"),
            (json!(1e16), "1e+16"),
            (json!(1.25e100), "1.25e+100"),
            (json!(123.456), "123.456"),
        ];
        for (value, want) in cases {
            let got = render(&value).map(|v| encode_header_value(&v));
            assert_eq!(got.as_deref(), Some(want), "{value}");
        }
        for value in [json!(null), json!([1]), json!({"a": 1})] {
            assert_eq!(render(&value), None, "{value}");
        }
    }

    fn listing(tools: Value, next: Option<&str>) -> String {
        let mut result = json!({"tools": tools});
        if let Some(next) = next {
            result["nextCursor"] = json!(next);
        }
        json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string()
    }

    fn tool(name: &str, header: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": header},
            "n": {"type": "integer", "x-mcp-header": format!("{header}-N")},
        }}})
    }

    fn call(name: &str, arguments: Value) -> String {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
            .to_string()
    }

    fn sorted(mut headers: Vec<(String, String)>) -> Vec<(String, String)> {
        headers.sort();
        headers
    }

    #[test]
    fn a_call_carries_the_headers_its_tool_s_listing_declared_for_the_arguments_present() {
        let known = ParamHeaders::default();
        assert!(
            known.headers(&call("route", json!({"region": "eu"}))).is_empty(),
            "not listed yet"
        );
        let page = known.learn(
            &listing(json!([tool("route", "Region"), {"name": "plain"}]), None),
            true,
        );
        assert_eq!(page.unwrap().names, ["route", "plain"]);
        let headers = known.headers(&call("route", json!({"region": "Zürich", "n": 3, "other": "x"})));
        let want = [
            ("Mcp-Param-Region".to_owned(), "=?base64?WsO8cmljaA==?=".to_owned()),
            ("Mcp-Param-Region-N".to_owned(), "3".to_owned()),
        ];
        assert_eq!(sorted(headers), want);
        let absent = known.headers(&call("route", json!({"region": null, "n": [1]})));
        assert!(absent.is_empty(), "null and unrenderable values send no header");
        assert!(known.headers(&call("plain", json!({"region": "eu"}))).is_empty());
    }

    #[test]
    fn a_whole_listing_replaces_what_was_known_and_a_page_adds_to_it() {
        let known = ParamHeaders::default();
        known.learn(&listing(json!([tool("a", "A")]), None), true);
        let page = known
            .learn(&listing(json!([tool("b", "B")]), Some("c2")), true)
            .unwrap();
        assert_eq!(page.next_cursor.as_deref(), Some("c2"));
        assert_eq!(
            known.headers(&call("a", json!({"region": "x"}))).len(),
            1,
            "a first page adds"
        );
        known.learn(&listing(json!([tool("c", "C")]), None), false);
        assert_eq!(
            known.headers(&call("a", json!({"region": "x"}))).len(),
            1,
            "a later page adds"
        );
        known.learn(&listing(json!([tool("b", "B2")]), None), true);
        assert!(
            known.headers(&call("a", json!({"region": "x"}))).is_empty(),
            "a whole listing replaces"
        );
        assert_eq!(
            known.headers(&call("b", json!({"region": "x"}))),
            [("Mcp-Param-B2".to_owned(), "x".to_owned())]
        );
        let bad = json!([{"name": "b", "inputSchema": {"properties": {"r": {"type": "number", "x-mcp-header": "R"}}}}]);
        known.learn(&listing(bad, Some("more")), false);
        assert!(
            known.headers(&call("b", json!({"region": "x"}))).is_empty(),
            "an invalid schema forgets"
        );
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32020, "message": "m"}}).to_string();
        assert_eq!(known.learn(&error, true), None);
        assert!(is_header_mismatch(&error));
        assert!(!is_header_mismatch(&listing(json!([]), None)));
    }

    #[test]
    fn the_channel_remembers_at_most_max_tools() {
        let known = ParamHeaders::default();
        let tools: Vec<Value> = (0..=MAX_TOOLS).map(|i| tool(&format!("t{i}"), "R")).collect();
        known.learn(&listing(Value::Array(tools), None), true);
        assert_eq!(known.lock().len(), MAX_TOOLS);
    }

    #[test]
    fn the_first_page_is_the_one_without_a_cursor() {
        assert!(first_page(r#"{"method":"tools/list"}"#));
        assert!(first_page(r#"{"method":"tools/list","params":{"cursor":null}}"#));
        assert!(!first_page(r#"{"method":"tools/list","params":{"cursor":"c"}}"#));
        let again: Value = serde_json::from_str(&relist_request(Some("c"))).unwrap();
        assert_eq!(again["params"]["cursor"], "c");
        assert_eq!(again["method"], "tools/list");
    }
}
