//! `call_target_template` without a network: the arguments' refusals (`args::parse`,
//! then `args::check` in upstream's order and words), the rendered URL, the
//! `list_targets` entry and its schemas (also checked with the `jsonschema` crate), and
//! `tools/list` with and without templates. Templates come from the configuration's
//! public loader, as the gateway gets them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::super::tools::{self, Limits};
use super::args::{self, Checked, Refusal};
use super::schema;
use crate::config::{Config, HarpoonTemplate};

/// `harpoon.max_response_bytes` of the tests' configuration.
const LIMIT: u64 = 4096;
const USER_AGENT: &str = "tunnelgate/0.1.0";

const BASE: &str = r#"
[control_plane]
tunnel_id = "tunnel_test"
api_key = "literal-test-key"

[mcp.channels.main]
url = "http://127.0.0.1:3001/mcp"

[harpoon]
max_response_bytes = 4096
"#;

/// UPSTREAM-2026 §2.1's example (fixed header given as a literal: no environment here).
const CASE: &str = r#"
[[harpoon.targets]]
label = "get_case_status"
[harpoon.targets.template]
version = 1
origin = "https://cases.example"
method = "GET"
path_template = "/casestatus/{case_id}"
query = { elevations = "true", complaints = "true" }
headers = { Authorization = "Bearer literal-fixed-secret" }
allowed_headers = ["Accept", "x-request-tag"]
follow_redirects = false
[harpoon.targets.template.parameters.case_id]
type = "string"
required = true
pattern = '^[A-Za-z0-9_-]+$'
max_length = 64
reserved_values = ["all", "admin"]
examples = ["CASE-123"]
"#;

/// Two parameters (an enum in the path, a pattern in the query, with no example) and a
/// fixed query value Go's `url.QueryEscape` changes.
const SEARCH: &str = r#"
[[harpoon.targets]]
label = "search"
description = "Search cases."
[harpoon.targets.template]
origin = "https://Search.Example:8443/"
path_template = "/v1/{region}/items"
query = { q = "{term}", note = "a b&c", limit = "10" }
parameters.region = { type = "string", required = true, enum = ["us", "eu"], max_length = 2 }
[harpoon.targets.template.parameters.term]
type = "string"
required = true
pattern = '[a-z~._-]+'
min_length = 2
max_length = 32
reserved_values = ["all"]
"#;

fn template(targets: &str) -> HarpoonTemplate {
    let config = Config::from_toml_str(&format!("{BASE}{targets}")).expect("the template is valid");
    assert_eq!(config.harpoon.max_response_bytes, LIMIT);
    config.harpoon.templates[0].clone()
}

fn case() -> HarpoonTemplate {
    template(CASE)
}

fn refusal(label: Option<&str>, message: &str) -> Refusal {
    let (label, message) = (label.map(str::to_owned), message.to_owned());
    Refusal { label, message }
}

fn invalid() -> Refusal {
    refusal(None, "invalid template arguments")
}

/// Lines of `message | JSON`, as pairs.
fn table(text: &str) -> Vec<(&str, Value)> {
    let mut pairs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (message, raw) = line.split_once(" | ").expect("message | JSON");
        pairs.push((message, serde_json::from_str(raw).expect("the table's JSON")));
    }
    assert!(pairs.len() > 1, "the table has its rows");
    pairs
}

/// `raw` through `args::parse` and then `args::check` against `t`.
fn call(t: &HarpoonTemplate, raw: &Value) -> Result<Checked, Refusal> {
    let parsed = args::parse(Some(&raw.to_string()))?;
    args::check(0, t, &parsed, LIMIT, USER_AGENT)
}

/// A call to `get_case_status` with `case_id` and the other arguments in `extra`.
fn case_call(case_id: Value, extra: Value) -> Value {
    let mut args = json!({"label": "get_case_status", "parameters": {"case_id": case_id}});
    for (k, v) in extra.as_object().expect("extra is an object") {
        args[k] = v.clone();
    }
    args
}

/// The keys of object `v`, in order, joined by `,`.
fn keys(v: &Value) -> String {
    let keys: Vec<&str> = v.as_object().expect("an object").keys().map(String::as_str).collect();
    keys.join(",")
}

/// Asserts `t` refuses `raw` with `message` (and its label).
fn refused(t: &HarpoonTemplate, raw: &Value, message: &str) {
    match call(t, raw) {
        Ok(checked) => panic!("{raw} should be refused with {message:?}, got {checked:?}"),
        Err(r) => assert_eq!(r, refusal(Some(&t.label), message), "{raw}"),
    }
}

#[test]
fn malformed_arguments_are_invalid_template_arguments() {
    let ok = r#"{"label":"get_case_status","parameters":{"case_id":"CASE-1"}}"#;
    assert!(args::parse(Some(ok)).is_ok());
    let padded = format!("{ok}{}", " ".repeat(32_768 - ok.len()));
    assert!(args::parse(Some(&padded)).is_ok(), "32768 bytes are read");
    let over = format!("{padded} ");
    let bad = [
        over.as_str(),
        "",
        "null",
        "[]",
        "\"get_case_status\"",
        "{",
        r#"{"label":"get_case_status","parameters":{"case_id":"CASE-1"}} {}"#,
        r#"{"label":"get_case_status","parameters":{"case_id":"CASE-1"}}x"#,
        r#"{"label":"get_case_status","parameters":{"a":{"b":{"c":{}}}}}"#,
        r#"{"label":"get_case_status","parameters":{"a":[[[]]]}}"#,
        r#"{"label":"get_case_status","label":"get_case_status","parameters":{}}"#,
        r#"{"label":"get_case_status","parameters":{"case_id":"a","case_id":"b"}}"#,
        r#"{"label":"get_case_status","parameters":{},"headers":{"Accept":"a","Accept":"b"}}"#,
        r#"{"label":"get_case_status","parameters":{},"path":"/x"}"#,
        r#"{"Label":"get_case_status","parameters":{}}"#,
        r#"{"label":"get_case_status","Parameters":{}}"#,
        r#"{"label":"get_case_status","parameters":{},"headers":{"Accept":1}}"#,
        r#"{"label":"get_case_status","parameters":{},"headers":["Accept"]}"#,
        r#"{"label":"get_case_status"}"#,
        r#"{"label":"get_case_status","parameters":null}"#,
        r#"{"label":"get_case_status","parameters":["CASE-1"]}"#,
        r#"{"label":"get_case_status","parameters":"CASE-1"}"#,
        r#"{"parameters":{}}"#,
        r#"{"label":"Get_Case_Status","parameters":{}}"#,
        r#"{"label":"","parameters":{}}"#,
        r#"{"label":"-case","parameters":{}}"#,
        r#"{"label":7,"parameters":{}}"#,
        r#"{"label":"get_case_status","parameters":{},"timeout_ms":1000.5}"#,
        r#"{"label":"get_case_status","parameters":{},"timeout_ms":"1000"}"#,
        r#"{"label":"get_case_status","parameters":{},"max_response_bytes":1.0}"#,
        r#"{"label":"get_case_status","parameters":{},"max_response_bytes":"1"}"#,
    ];
    for raw in bad {
        assert_eq!(args::parse(Some(raw)), Err(invalid()), "{raw}");
    }
    assert_eq!(args::parse(None), Err(invalid()), "no arguments");
    let long = format!(r#"{{"label":"{}","parameters":{{}}}}"#, "a".repeat(65));
    assert_eq!(args::parse(Some(&long)), Err(invalid()), "a label over 64 characters");
}

#[test]
fn nesting_of_four_is_read_and_the_label_is_not_looked_up_by_parse() {
    let four = r#"{"label":"get_case_status","parameters":{"a":{"b":{}}}}"#;
    assert!(args::parse(Some(four)).is_ok(), "the object, parameters, a, b");
    let arrays = r#"{"label":"get_case_status","parameters":{"a":[[]]}}"#;
    assert!(args::parse(Some(arrays)).is_ok());
    let parsed = args::parse(Some(r#"{"label":"nobody","parameters":{},"timeout_ms":5}"#)).unwrap();
    assert_eq!(parsed["label"], "nobody", "the handler refuses it");
}

#[test]
fn parameters_must_be_the_declared_strings() {
    let t = case();
    let keys = "template parameter keys must match the declared schema";
    for parameters in [
        json!({}),
        json!({"case_id": "CASE-1", "extra": "x"}),
        json!({"CASE_ID": "CASE-1"}),
        json!({"other": "CASE-1"}),
    ] {
        refused(&t, &json!({"label": "get_case_status", "parameters": parameters}), keys);
    }
    for value in [json!(5), json!(null), json!(["CASE-1"]), json!({"a": "b"}), json!(true)] {
        let must = "template parameter case_id must be a string";
        refused(&t, &case_call(value, json!({})), must);
    }
}

const SEARCH_CASES: &str = r#"
    template parameter region: is outside its enum | {"label": "search", "parameters": {"region": "fr", "term": "ab"}}
    template parameter region: is outside its enum | {"label": "search", "parameters": {"region": "EU", "term": "ab"}}
    template parameter term: identifier length is outside its bounds | {"label": "search", "parameters": {"region": "eu", "term": "a"}}
    template parameter term: is reserved | {"label": "search", "parameters": {"region": "eu", "term": "ALL"}}
    template parameter term: does not match its pattern | {"label": "search", "parameters": {"region": "eu", "term": "AB"}}
"#;

#[test]
fn values_are_checked_in_upstreams_order_and_words() {
    let t = case();
    let words = |w: &str| format!("template parameter case_id: {w}");
    let cases = [
        ("", "identifier length is outside its bounds"),
        (&*"a".repeat(65), "identifier length is outside its bounds"),
        (&*"/".repeat(65), "identifier length is outside its bounds"),
        ("a/b", "contains forbidden characters or path segments"),
        ("a b", "contains forbidden characters or path segments"),
        ("a%2Fb", "contains forbidden characters or path segments"),
        ("caf\u{e9}", "contains forbidden characters or path segments"),
        (".", "contains forbidden characters or path segments"),
        ("..", "contains forbidden characters or path segments"),
        ("all", "is reserved"),
        ("ALL", "is reserved"),
        ("aDmIn", "is reserved"),
        ("CASE.1", "does not match its pattern"),
        ("~x", "does not match its pattern"),
    ];
    for (value, problem) in cases {
        refused(&t, &case_call(json!(value), json!({})), &words(problem));
    }
    // Reserved before the pattern: `ALL` fails both.
    for (message, raw) in table(SEARCH_CASES) {
        refused(&template(SEARCH), &raw, message);
    }
    for ok in ["CASE-123", &*"a".repeat(64), "allx", "x"] {
        assert!(call_ok(&t, json!(ok))
            .url
            .ends_with(&format!("/casestatus/{ok}?complaints=true&elevations=true")));
    }
}

fn call_ok(t: &HarpoonTemplate, case_id: Value) -> Checked {
    call(t, &case_call(case_id.clone(), json!({}))).unwrap_or_else(|r| panic!("{case_id} refused: {r:?}"))
}

const HEADER_CASES: &str = r#"
    invalid or forbidden template header name | {"bad header": "x"}
    invalid or forbidden template header name | {"": "x"}
    invalid or forbidden template header name | {"X-Api-Key": "x"}
    invalid or forbidden template header name | {"Authorization": "x"}
    invalid or forbidden template header name | {"X-Auth-Token": "x"}
    routing and identity headers are forbidden for templates | {"X-Forwarded-For": "1.2.3.4"}
    routing and identity headers are forbidden for templates | {"host": "evil.example"}
    routing and identity headers are forbidden for templates | {"X-HTTP-Method-Override": "POST"}
    caller header is not permitted by the target | {"X-Other": "x"}
    duplicate caller header name | {"accept": "a", "ACCEPT": "b"}
    invalid caller header value | {"Accept": "a\r\nX-Injected: 1"}
    invalid caller header value | {"Accept": "a\u0000"}
"#;

#[test]
fn caller_headers_are_checked_in_upstreams_order_and_words() {
    let t = case();
    let mut cases = table(HEADER_CASES);
    cases.push(("invalid caller header value", json!({"Accept": "x".repeat(8193)})));
    let large = json!({"Accept": "x".repeat(5000), "X-Request-Tag": "y".repeat(5000)});
    cases.push(("template headers exceed size limit", large));
    for (message, headers) in cases {
        refused(&t, &case_call(json!("CASE-1"), json!({"headers": headers})), message);
    }
    let headers = json!({"headers": {"x-REQUEST-tag": "t1", "accept": "application/json"}});
    let checked = call(&t, &case_call(json!("CASE-1"), headers)).unwrap();
    let sent: Vec<(&str, &str)> = checked.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    assert_eq!(
        sent,
        [
            ("X-Request-Tag", "t1"),
            ("Accept", "application/json"),
            ("Authorization", "Bearer literal-fixed-secret"),
        ],
        "the caller's in canonical case, then the fixed ones"
    );
    let none = call(&t, &case_call(json!("CASE-1"), json!({"headers": {}}))).unwrap();
    assert_eq!(none.headers.len(), 1, "the fixed header only");
}

#[test]
fn more_than_thirty_two_headers_are_too_many() {
    // The loader never lets 32 allowed and 1 fixed through; a template built around it
    // still refuses them.
    let mut t = case();
    t.allowed_headers = (0..40).map(|i| format!("X-H{i:02}")).collect();
    let headers = |n: usize| -> Map<String, Value> { (0..n).map(|i| (format!("X-H{i:02}"), json!("v"))).collect() };
    let ok = call(&t, &case_call(json!("CASE-1"), json!({"headers": headers(31)}))).unwrap();
    assert_eq!(ok.headers.len(), 32);
    let many = case_call(json!("CASE-1"), json!({"headers": headers(32)}));
    refused(&t, &many, "too many template headers");
}

/// `u64::MAX` for `timeout_ms` was once taken as the default (30 s).
const LIMIT_CASES: &str = r#"
    timeout must be positive | {"timeout_ms": 0}
    timeout must be positive | {"timeout_ms": -1}
    timeout must be positive | {"timeout_ms": -9223372036854775808}
    timeout must be at least 100ms | {"timeout_ms": 99}
    timeout must be at most 120000ms | {"timeout_ms": 120001}
    timeout must be at most 120000ms | {"timeout_ms": 9223372036854775807}
    timeout must be at most 120000ms | {"timeout_ms": 18446744073709551615}
    max_response_bytes must be positive | {"max_response_bytes": 0}
    max_response_bytes must be positive | {"max_response_bytes": -5}
    max_response_bytes must be less than or equal to 4096 | {"max_response_bytes": 4097}
    max_response_bytes must be less than or equal to 4096 | {"max_response_bytes": 18446744073709551615}
"#;

#[test]
fn limits_are_bounded_as_upstream_bounds_them() {
    let t = case();
    for (message, extra) in table(LIMIT_CASES) {
        refused(&t, &case_call(json!("CASE-1"), extra), message);
    }
    let defaults = call_ok(&t, json!("CASE-1"));
    assert_eq!(defaults.timeout, Duration::from_secs(30));
    assert_eq!(defaults.max_bytes, LIMIT);
    let edges = [(100, 1), (120_000, LIMIT)];
    for (timeout, max) in edges {
        let extra = json!({"timeout_ms": timeout, "max_response_bytes": max});
        let checked = call(&t, &case_call(json!("CASE-1"), extra)).unwrap();
        assert_eq!(checked.timeout, Duration::from_millis(timeout));
        assert_eq!(checked.max_bytes, max);
    }
}

#[test]
fn the_checks_run_parameters_then_headers_then_limits() {
    let t = case();
    let bad_header = json!({"X-Other": "x"});
    let all_bad = case_call(json!("a/b"), json!({"headers": bad_header, "timeout_ms": 1}));
    let forbidden = "template parameter case_id: contains forbidden characters or path segments";
    refused(&t, &all_bad, forbidden);
    let header_and_limit = case_call(json!("CASE-1"), json!({"headers": bad_header, "timeout_ms": 1}));
    refused(&t, &header_and_limit, "caller header is not permitted by the target");
    let search = template(SEARCH);
    let both = json!({"label": "search", "parameters": {"region": "fr", "term": "a/b"}});
    refused(&search, &both, "template parameter region: is outside its enum");
}

#[test]
fn the_url_is_origin_path_and_the_sorted_form_encoded_query() {
    let t = case();
    assert_eq!(
        call_ok(&t, json!("CASE-123")).url,
        "https://cases.example/casestatus/CASE-123?complaints=true&elevations=true",
        "UPSTREAM-2026 §2.4's example"
    );
    let search = template(SEARCH);
    let values: BTreeMap<String, String> = [("region", "eu"), ("term", "ab~c.d")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let expected = "https://search.example:8443/v1/eu/items?limit=10&note=a+b%26c&q=ab~c.d";
    assert_eq!(search.render(&values), expected);
    let raw = json!({"label": "search", "parameters": {"region": "eu", "term": "ab~c.d"}});
    let checked = call(&search, &raw).unwrap();
    assert_eq!((checked.url.as_str(), checked.index), (expected, 0));
    let mut root = case();
    root.path.clear();
    root.query.clear();
    assert_eq!(root.render(&BTreeMap::new()), "https://cases.example/", "path `/`");
}

#[test]
fn a_rendered_url_over_4096_bytes_is_refused() {
    // The loader refuses such a template; one built around it still refuses the call.
    let mut t = case();
    t.origin = format!("https://{}.example", "h".repeat(4040));
    let long = case_call(json!("CASE-1"), json!({}));
    refused(&t, &long, "rendered URL exceeds size limit");
}

#[test]
fn the_entry_has_upstreams_fields_in_upstreams_order() {
    let entry = schema::entry(&case(), LIMIT);
    let order = "template_version,parameters_schema,invocation,label,description,category,source,tags,allowed_methods";
    assert_eq!(keys(&entry), order);
    assert_eq!(entry["template_version"], 1);
    assert_eq!(entry["label"], "get_case_status");
    assert_eq!(entry["allowed_methods"], json!(["GET"]));
    // UPSTREAM-2026 §2.2's example, byte for byte.
    let expected = concat!(
        r#"{"additionalProperties":false,"properties":{"case_id":{"#,
        r#""allOf":[{"not":{"pattern":"[^A-Za-z0-9_.~-]"}},{"not":{"enum":[".",".."]}}],"#,
        r#""examples":["CASE-123"],"maxLength":64,"minLength":1,"#,
        r#""not":{"pattern":"^(?:[aA][lL][lL]|[aA][dD][mM][iI][nN])$"},"#,
        r#""pattern":"^(?:^[A-Za-z0-9_-]+$)$","type":"string"}},"required":["case_id"],"type":"object"}"#
    );
    assert_eq!(entry["parameters_schema"].to_string(), expected);
    let invocation = &entry["invocation"];
    assert_eq!(invocation["tool_name"], "call_target_template");
    assert_eq!(
        invocation["examples"],
        json!([{"label": "get_case_status", "parameters": {"case_id": "CASE-123"}}])
    );
    let text = entry.to_string();
    for hidden in "cases.example casestatus elevations complaints literal-fixed-secret Authorization".split(' ') {
        assert!(!text.contains(hidden), "the entry shows {hidden:?}: {text}");
    }
}

#[test]
fn the_input_schema_is_the_exact_call() {
    let t = case();
    let input = schema::entry(&t, LIMIT)["invocation"]["input_schema"].clone();
    assert!(input["description"].as_str().is_some_and(|d| !d.is_empty()), "{input}");
    let header = json!({"maxLength": 8192, "not": {"pattern": "[\u{0}-\u{1f}\u{7f}]"}, "type": "string"});
    let expected = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "additionalProperties": false,
        "description": input["description"],
        "properties": {
            "headers": {"additionalProperties": false, "default": {}, "maxProperties": 32,
                        "properties": {"Accept": header, "X-Request-Tag": header}, "type": "object"},
            "label": {"const": "get_case_status", "maxLength": 64, "minLength": 1,
                      "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$", "type": "string"},
            "max_response_bytes": {"default": LIMIT, "maximum": LIMIT, "minimum": 1, "type": "integer"},
            "parameters": schema::parameters_schema(&t),
            "timeout_ms": {"default": 30_000, "maximum": 120_000, "minimum": 100, "type": "integer"},
        },
        "required": ["label", "parameters"],
        "type": "object",
    });
    assert_eq!(
        input.to_string(),
        expected.to_string(),
        "keys sorted as Go writes a map"
    );
}

#[test]
fn the_parameters_schema_sorts_required_and_keeps_the_enum_as_configured() {
    let mut search = template(SEARCH);
    let schema = schema::parameters_schema(&search);
    assert_eq!(schema["required"], json!(["region", "term"]));
    assert_eq!(schema["additionalProperties"], false);
    let region = &schema["properties"]["region"];
    assert_eq!(region["enum"], json!(["us", "eu"]));
    assert_eq!(keys(region), "allOf,enum,maxLength,minLength,type");
    let term = &schema["properties"]["term"];
    assert_eq!(term["pattern"], "^(?:[a-z~._-]+)$");
    assert_eq!(term["not"], json!({"pattern": "^(?:[aA][lL][lL])$"}));
    assert_eq!((&term["minLength"], &term["maxLength"]), (&json!(2), &json!(32)));
    search.parameters.reverse();
    let reversed = schema::parameters_schema(&search);
    assert_eq!(reversed["required"], json!(["region", "term"]));
    let entry = schema::entry(&template(SEARCH), LIMIT);
    assert_eq!(entry["description"], "Search cases.");
    assert!(entry["invocation"].get("examples").is_none(), "{entry}");
}

/// Asserts every object in `v` has its keys sorted, as Go writes a map.
fn assert_sorted(v: &Value, at: &str) {
    match v {
        Value::Object(map) => {
            let keys: Vec<&String> = map.keys().collect();
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted, "keys at {at:?}");
            for (k, child) in map {
                assert_sorted(child, &format!("{at}/{k}"));
            }
        }
        Value::Array(items) => items.iter().for_each(|i| assert_sorted(i, at)),
        _ => {}
    }
}

#[test]
fn keys_inside_the_schemas_are_sorted() {
    for t in [case(), template(SEARCH)] {
        let entry = schema::entry(&t, LIMIT);
        assert_sorted(&entry["parameters_schema"], "parameters_schema");
        assert_sorted(&entry["invocation"]["input_schema"], "input_schema");
    }
}

/// A one-parameter enum template `status` whose `state` has `extra` settings.
fn status(extra: &str) -> HarpoonTemplate {
    template(&format!(
        r#"
[[harpoon.targets]]
label = "status"
[harpoon.targets.template]
origin = "https://status.example"
path_template = "/s/{{state}}/{{code}}"
[harpoon.targets.template.parameters.state]
type = "string"
required = true
enum = ["open", "closed", "pending"]
max_length = 8
{extra}
[harpoon.targets.template.parameters.code]
type = "string"
required = true
pattern = "[0-9]+"
max_length = 4
examples = ["42", "7"]
"#
    ))
}

#[test]
fn invocation_examples_take_the_first_example_else_the_smallest_enum_value() {
    let examples = |t: &HarpoonTemplate| schema::entry(t, LIMIT)["invocation"]["examples"].clone();
    assert_eq!(
        examples(&status("")),
        json!([{"label": "status", "parameters": {"code": "42", "state": "closed"}}])
    );
    assert_eq!(
        examples(&status("examples = [\"pending\", \"open\"]")),
        json!([{"label": "status", "parameters": {"code": "42", "state": "pending"}}])
    );
    // The smallest enum value is reserved: no example that would be refused.
    let reserved = status("reserved_values = [\"CLOSED\"]");
    assert_eq!(examples(&reserved), Value::Null, "{}", schema::entry(&reserved, LIMIT));
}

#[test]
fn reserved_values_become_a_pattern_ecmascript_reads_in_unicode_mode() {
    // `-` and `~` escaped (`\-`, `\~`) are a SyntaxError for `new RegExp(p, "u")`
    // (ajv's default); Go's `regexp.QuoteMeta` escapes neither, only `.` here.
    let t = status("reserved_values = [\"a-b\", \"x~y\", \"q.r_s\"]");
    let schema = schema::parameters_schema(&t);
    let pattern = &schema["properties"]["state"]["not"]["pattern"];
    assert_eq!(pattern, r"^(?:[aA]-[bB]|[xX]~[yY]|[qQ]\.[rR]_[sS])$");
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{e}: {schema}"))
}

#[test]
fn the_parameters_schema_accepts_what_check_accepts() {
    let t = case();
    let entry = schema::entry(&t, LIMIT);
    let parameters = validator(&entry["parameters_schema"]);
    assert!(parameters.is_valid(&json!({"case_id": "CASE-123"})));
    for bad in [
        json!({"case_id": "admin"}),
        json!({"case_id": "aDmIn"}),
        json!({"case_id": "ALL"}),
        json!({"case_id": "a.b"}),
        json!({"case_id": "a/b"}),
        json!({"case_id": ".."}),
        json!({"case_id": ""}),
        json!({"case_id": "a".repeat(65)}),
        json!({"case_id": 5}),
        json!({}),
        json!({"case_id": "CASE-1", "other": "x"}),
    ] {
        assert!(!parameters.is_valid(&bad), "{bad} must be refused by the schema");
        let refused = call(&t, &json!({"label": "get_case_status", "parameters": bad})).is_err();
        assert!(refused, "and by the handler: {bad}");
    }
    let input = validator(&entry["invocation"]["input_schema"]);
    let example = &entry["invocation"]["examples"][0];
    assert!(input.is_valid(example), "{example}");
    assert!(call(&t, example).is_ok());
    for bad in [
        json!({"label": "other", "parameters": {"case_id": "CASE-1"}}),
        json!({"label": "get_case_status", "parameters": {"case_id": "CASE-1"}, "timeout_ms": 99}),
        json!({"label": "get_case_status", "parameters": {"case_id": "CASE-1"}, "headers": {"X-Other": "x"}}),
        json!({"label": "get_case_status", "parameters": {"case_id": "CASE-1"}, "max_response_bytes": LIMIT + 1}),
    ] {
        assert!(!input.is_valid(&bad), "{bad}");
    }
    let search = validator(&schema::parameters_schema(&template(SEARCH)));
    assert!(search.is_valid(&json!({"region": "eu", "term": "ab~c.d"})));
    for bad in [
        json!({"region": "fr", "term": "ab"}),
        json!({"region": "eu", "term": "All"}),
    ] {
        assert!(!search.is_valid(&bad), "{bad}");
    }
}

/// `tools/list` before templates existed (commit 12806fa), built from the same parts.
fn list_before_templates(limits: Limits) -> Value {
    let base = "https://github.com/openai/tunnel-client/pkg";
    let object = |id: &str, properties: Value, required: &[&str]| {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": format!("{base}/{id}"),
            "type": "object",
            "additionalProperties": false,
            "properties": properties,
            "required": required,
        })
    };
    let strings = json!({"type": "array", "items": {"type": "string"}});
    json!({"tools": [
        {
            "name": "call_target",
            "title": "Call Harpoon target",
            "description": "Call an allowlisted HTTP target by label.",
            "annotations": {"openWorldHint": true},
            "inputSchema": tools::call_target_schema(limits),
            "outputSchema": object("runtimeharpoon/call-target-response", json!({
                "status_code": {"type": "integer"},
                "headers": {"type": "object", "additionalProperties": strings},
                "body_base64": {"type": "string"},
                "body_size_bytes": {"type": "integer"},
                "truncated": {"type": "boolean"}
            }), &["status_code", "body_size_bytes", "truncated"]),
        },
        {
            "name": "get_oauth_target_audience",
            "title": "Get OAuth target audience",
            "description": "Resolve the exact private_key_jwt audience for an OAuth token endpoint target.",
            "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
            "inputSchema": tools::audience_schema(),
            "outputSchema": object("harpoon/oauth-target-audience-response",
                json!({"audience": {"type": "string"}}), &["audience"]),
        },
        {
            "name": "list_targets",
            "title": "List Harpoon targets",
            "description": "List available Harpoon targets by label.",
            "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
            "inputSchema": tools::list_targets_schema(),
            "outputSchema": object("runtimeharpoon/list-targets-response", json!({
                "targets": {"type": "array", "items": {"type": "object", "properties": {
                    "label": {"type": "string"}, "description": {"type": "string"},
                    "category": {"type": "string"}, "source": {"type": "string"},
                    "tags": strings, "allowed_methods": strings
                }}}
            }), &["targets"]),
        },
    ]})
}

const LIMITS: Limits = Limits {
    max_response_bytes: LIMIT,
    max_redirects: 3,
};

#[test]
fn tools_list_is_unchanged_without_templates() {
    let list = tools::list(LIMITS, &[]);
    let before = list_before_templates(LIMITS).to_string();
    assert_eq!(list.to_string(), before, "byte-identical");
    assert!(!list.to_string().contains("template"), "{list}");
}

#[test]
fn tools_list_shows_call_target_template_only_with_a_template() {
    let list = tools::list(LIMITS, &[case()]);
    let all = list["tools"].as_array().unwrap();
    let names: Vec<&str> = all.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let expected = "call_target,call_target_template,get_oauth_target_audience,list_targets";
    assert_eq!(names.join(","), expected);
    let tool = &all[1];
    assert_eq!(tool["title"], "Call Harpoon target template");
    assert_eq!(tool["annotations"]["readOnlyHint"], true);
    assert_eq!(tool["annotations"]["idempotentHint"], true);
    let input = &tool["inputSchema"];
    assert_eq!(input["required"], json!(["label", "parameters"]));
    let properties = keys(&input["properties"]);
    assert_eq!(properties, "headers,label,max_response_bytes,parameters,timeout_ms");
    let parameters = &input["properties"]["parameters"];
    let generic =
        json!({"additionalProperties": {"type": "string"}, "maxProperties": 16, "minProperties": 1, "type": "object"});
    assert_eq!(parameters, &generic);
    assert_eq!(input["properties"]["max_response_bytes"]["maximum"], LIMIT);
    let entry = &all[3]["outputSchema"]["properties"]["targets"]["items"]["properties"];
    let gained = "label,description,category,source,tags,allowed_methods,template_version,parameters_schema,invocation";
    assert_eq!(keys(entry), gained, "list_targets' entries gain the template fields");
    assert_ne!(all[3]["description"], "List available Harpoon targets by label.");
    let without: Vec<Value> = tools::list(LIMITS, &[])["tools"].as_array().unwrap().clone();
    assert_eq!(all[0], without[0], "call_target is the same tool");
    assert_eq!(all[2], without[1], "get_oauth_target_audience is the same tool");
}
