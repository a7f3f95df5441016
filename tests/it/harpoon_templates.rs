//! Harpoon target templates end to end, through the real binary against the simulator and
//! a real HTTP server on loopback (`py_oauth_server.py --mode redirect`, which logs every
//! request as `seen METHOD PATH` and echoes what `/casestatus/ID` was sent): what
//! `tools/list`, `list_targets`, `initialize`, `/status` and `doctor` show of a template
//! (never its origin, path, query or fixed header), the one `GET` a call renders, every
//! refusal answered as a tool error that reaches nothing, a 3xx that is the result and a
//! body over the limit that is an error, policies that stop the start, and the strict
//! fence holding a template call as it holds `call_target`.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::seen_n;
use crate::harness::{final_json, spawn_py_oauth_server, ChildGuard, Gateway, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(20);
const LABEL: &str = "get_case_status";
/// The template's fixed `Authorization`, read from a file (written with a newline, which
/// the reference strips): a canary no log, listing or status may show.
const SECRET: &str = "Bearer case-secret-canary-5RT9QX";

/// The brief's template at `origin`, its `Authorization` read from `secret_file`.
fn case_status(origin: &str, secret_file: &str) -> String {
    format!(
        r#"
[[harpoon.targets]]
label = "get_case_status"
description = "case status"
[harpoon.targets.template]
version = 1
origin = "{origin}"
method = "GET"
path_template = "/casestatus/{{case_id}}"
query = {{ elevations = "true", complaints = "{{view}}" }}
allowed_headers = ["Accept", "X-Request-Tag"]
headers = {{ Authorization = "file:{secret_file}" }}
follow_redirects = false
[harpoon.targets.template.parameters.case_id]
type = "string"
required = true
pattern = '^[A-Za-z0-9_-]+$'
max_length = 64
reserved_values = ["all", "admin"]
examples = ["CASE-123"]
[harpoon.targets.template.parameters.view]
type = "string"
required = true
enum = ["short", "full"]
max_length = 8
"#
    )
}

/// A template of one parameter, in the query, at `path` of `origin` (version, method and
/// description left to their defaults).
fn one_parameter(label: &str, origin: &str, path: &str) -> String {
    format!(
        r#"
[[harpoon.targets]]
label = "{label}"
[harpoon.targets.template]
origin = "{origin}"
path_template = "{path}"
query = {{ case = "{{case_id}}" }}
[harpoon.targets.template.parameters.case_id]
type = "string"
required = true
pattern = '[A-Z0-9-]+'
max_length = 16
"#
    )
}

/// The secret's file in the rig's folder, written with a trailing newline.
fn secret_file(rig: &Rig) -> String {
    let path = rig.dir.path().join("case-api-authorization");
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    path.display().to_string()
}

/// `[harpoon]` for the peer at `base`: the template, an exact target `landing`, and
/// templates `case_hop` (a 302 to `/landing`) and `case_big` (150000 bytes).
fn policy(rig: &Rig, base: &str) -> String {
    let landing = format!("\n[[harpoon.targets]]\nlabel = \"landing\"\nurl = \"{base}/landing\"\n");
    let hop = one_parameter("case_hop", base, "/hop");
    let big = one_parameter("case_big", base, "/big");
    format!("{}{landing}{hop}{big}", only_case_status(rig, base))
}

/// `[harpoon]` with [`case_status`] at `origin` alone.
fn only_case_status(rig: &Rig, origin: &str) -> String {
    format!(
        "\n[harpoon]\nallow_plaintext_http = true\n{}",
        case_status(origin, &secret_file(rig))
    )
}

/// The peer, its origin, and a default-mode gateway with [`policy`].
struct Case {
    peer: ChildGuard,
    base: String,
    rig: Rig,
    gw: Gateway,
}

async fn start() -> Case {
    let (peer, ready) = spawn_py_oauth_server("redirect").await;
    let base = ready.trim_end_matches("/mcp").to_owned();
    let rig = Rig::start("").await;
    let extra = policy(&rig, &base);
    let options = RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    };
    // At debug: even then no parameter, path or header value is logged.
    let config = rig
        .config(&options)
        .replace("log_level = \"info\"", "log_level = \"debug\"");
    let gw = rig.spawn_gateway(&config).await;
    Case { peer, base, rig, gw }
}

impl Case {
    /// `cmd` on `harpoon`, answered `200` as a JSON-RPC response: its `resp_json`.
    async fn send(&self, cmd: NewCommand) -> Value {
        let id = self.rig.sim.enqueue(cmd.channel("harpoon"));
        let rec = self
            .rig
            .wait("the harpoon command answered", |r| r.is_completed(&id))
            .await;
        let body = final_json(&rec, &id);
        assert_eq!(body["resp_type"], "jsonrpc_response", "{body}");
        assert_eq!(body["resp_code"], 200, "{body}");
        body["resp_json"].clone()
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": format!("t-{method}"), "method": method, "params": params});
        self.send(NewCommand::jsonrpc(message)).await
    }

    /// `tools/call NAME`: the tool's result (a JSON-RPC error panics).
    async fn tool(&self, name: &str, arguments: Value) -> Value {
        let answer = self
            .rpc("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        assert!(answer["error"].is_null(), "{name}: {answer}");
        answer["result"].clone()
    }

    async fn template(&self, arguments: Value) -> Value {
        self.tool("call_target_template", arguments).await
    }

    /// A template call that must succeed: its `structuredContent` and the body decoded.
    async fn answered(&self, arguments: Value) -> (Value, Vec<u8>) {
        let result = self.template(arguments.clone()).await;
        assert!(result["isError"].is_null(), "{arguments}: {result}");
        let structured = result["structuredContent"].clone();
        let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, structured, "the text is the structured result");
        assert!(structured.get("truncated").is_none(), "{structured}");
        let body = match structured["body_base64"].as_str() {
            Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).unwrap(),
            None => Vec::new(),
        };
        assert_eq!(structured["body_size_bytes"], body.len(), "{structured}");
        (structured, body)
    }

    async fn stop(mut self) {
        self.rig.assert_all_bodies_valid();
        self.gw.sigterm();
        assert_eq!(self.gw.wait_exit(EXIT).await, Some(0), "{}", self.gw.stderr());
    }
}

/// A refused call's text (an `isError` result with no structured content).
fn refusal(result: &Value) -> &str {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    result["content"][0]["text"].as_str().unwrap()
}

/// The value of the Prometheus series `line` (its exact name and labels), or 0.
fn series(metrics: &str, line: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0, |v| v.parse().unwrap())
}

/// `tunnelgate_harpoon_refusals_total` of `reason`.
fn refusals(metrics: &str, reason: &str) -> u64 {
    series(
        metrics,
        &format!("tunnelgate_harpoon_refusals_total{{reason=\"{reason}\"}}"),
    )
}

/// The arguments of a call the template accepts.
fn valid(case_id: &str) -> Value {
    json!({"label": LABEL, "parameters": {"case_id": case_id, "view": "short"}})
}

/// [`valid`] with `key` set to `value`.
fn with(key: &str, value: Value) -> Value {
    let mut arguments = valid("CASE-9");
    arguments[key] = value;
    arguments
}

/// [`valid`] with parameter `name` set to `value`.
fn with_parameter(name: &str, value: Value) -> Value {
    let mut arguments = valid("CASE-9");
    arguments["parameters"][name] = value;
    arguments
}

/// `initialize`, `tools/list` and `list_targets`: the template is listed with its schema
/// and its invocation, and nothing of where it goes.
async fn assert_catalog(case: &Case) {
    let hello =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}});
    let init = case.rpc("initialize", hello).await;
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(instructions.contains("use call_target_template with"), "{init}");
    assert!(instructions.contains("do not follow redirects"), "{init}");

    let tools = case.rpc("tools/list", json!({})).await;
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let expected = "call_target call_target_template get_oauth_target_audience list_targets";
    assert_eq!(names.join(" "), expected);
    let tool = &tools[1];
    assert_eq!(tool["title"], "Call Harpoon target template", "{tool}");
    let annotations = json!({"idempotentHint": true, "readOnlyHint": true});
    assert_eq!(tool["annotations"], annotations, "{tool}");
    let required = json!(["label", "parameters"]);
    assert_eq!(tool["inputSchema"]["required"], required, "{tool}");
    assert!(tool["outputSchema"]["properties"].get("truncated").is_none(), "{tool}");
    let entry_properties = &tools[3]["outputSchema"]["properties"]["targets"]["items"]["properties"];
    for field in ["template_version", "parameters_schema", "invocation"] {
        assert!(entry_properties.get(field).is_some(), "{field}: {entry_properties}");
    }

    let listed = case.tool("list_targets", json!({})).await;
    let targets = listed["structuredContent"]["targets"].as_array().unwrap().clone();
    let labels: Vec<&str> = targets.iter().filter_map(|t| t["label"].as_str()).collect();
    assert_eq!(labels, ["landing", LABEL, "case_hop", "case_big"]);
    assert_eq!(targets[0]["allowed_methods"], json!(["GET", "POST", "PUT"]));
    assert!(targets[0].get("template_version").is_none(), "{}", targets[0]);
    assert_template_entry(&targets[1]);
    // Defaults: no description, version 1; no example without one for every parameter.
    let hop = &targets[2];
    assert_eq!(hop["description"], "", "{hop}");
    assert_eq!(hop["template_version"], 1, "{hop}");
    assert!(hop["invocation"].get("examples").is_none(), "{hop}");
    let shown = listed.to_string();
    let hidden = "127.0.0.1 casestatus /hop elevations complaints case-secret-canary case-api-authorization";
    for hidden in hidden.split(' ') {
        assert!(!shown.contains(hidden), "list_targets shows {hidden:?}: {shown}");
    }
}

/// `get_case_status`' `list_targets` entry, field by field and in upstream's order.
fn assert_template_entry(entry: &Value) {
    let keys: Vec<&str> = entry.as_object().unwrap().keys().map(String::as_str).collect();
    let order = "template_version parameters_schema invocation label description category source tags allowed_methods";
    assert_eq!(keys.join(" "), order);
    assert_eq!(entry["template_version"], 1);
    assert_eq!(entry["description"], "case status");
    assert_eq!(entry["category"], "config");
    assert_eq!(entry["allowed_methods"], json!(["GET"]));
    let charset = json!([{"not": {"pattern": "[^A-Za-z0-9_.~-]"}}, {"not": {"enum": [".", ".."]}}]);
    let expected = json!({"additionalProperties": false, "properties": {
        "case_id": {"allOf": charset, "examples": ["CASE-123"], "maxLength": 64, "minLength": 1,
            "not": {"pattern": "^(?:[aA][lL][lL]|[aA][dD][mM][iI][nN])$"},
            "pattern": "^(?:^[A-Za-z0-9_-]+$)$", "type": "string"},
        "view": {"allOf": charset, "enum": ["short", "full"], "maxLength": 8, "minLength": 1, "type": "string"}},
        "required": ["case_id", "view"], "type": "object"});
    // Equal as JSON, and written as upstream writes it (keys sorted).
    assert_eq!(entry["parameters_schema"], expected);
    assert_eq!(entry["parameters_schema"].to_string(), expected.to_string());
    let invocation = &entry["invocation"];
    assert_eq!(invocation["tool_name"], "call_target_template");
    assert_eq!(
        invocation["examples"],
        json!([{"label": LABEL, "parameters": {"case_id": "CASE-123", "view": "full"}}])
    );
    let input = &invocation["input_schema"];
    assert_eq!(input["additionalProperties"], false, "{input}");
    assert_eq!(input["required"], json!(["label", "parameters"]), "{input}");
    assert_eq!(input["properties"]["label"]["const"], LABEL, "{input}");
    assert_eq!(input["properties"]["parameters"], expected, "{input}");
    let headers: Vec<&str> = input["properties"]["headers"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(headers, ["Accept", "X-Request-Tag"], "{input}");
    assert_eq!(input["properties"]["max_response_bytes"]["maximum"], 102_400, "{input}");
}

#[tokio::test]
async fn a_template_is_listed_without_its_destination_and_a_call_makes_exactly_the_rendered_get() {
    let case = start().await;
    assert_catalog(&case).await;

    let mut arguments = valid("CASE-123");
    arguments["parameters"]["view"] = json!("full");
    arguments["headers"] = json!({"X-Request-Tag": "tag-7", "accept": "application/json"});
    let (structured, body) = case.answered(arguments).await;
    assert_eq!(structured["status_code"], 200, "{structured}");
    assert_eq!(
        structured["headers"]["Content-Type"][0], "application/json",
        "{structured}"
    );
    // What the peer received: the rendered path and query, the caller's allowed headers,
    // the fixed Authorization (its file's newline stripped) and the gateway's User-Agent.
    let echo: Value = serde_json::from_slice(&body).unwrap();
    let user_agent = echo["user-agent"].as_str().unwrap_or_default();
    assert!(user_agent.starts_with("tunnelgate/"), "{echo}");
    let expected = json!({"method": "GET", "path": "/casestatus/CASE-123", "query": "complaints=full&elevations=true",
        "authorization": SECRET, "x-request-tag": "tag-7", "accept": "application/json", "user-agent": user_agent});
    assert_eq!(echo, expected);
    assert_eq!(seen_n(&case.peer, 1).await, ["GET /casestatus/CASE-123"]);

    let status = case.rig.status().await;
    let listed = status["harpoon"]["targets"].as_array().unwrap();
    let shown = listed.iter().find(|t| t["label"] == LABEL).unwrap();
    assert_eq!(
        *shown,
        json!({"label": LABEL, "category": "config", "origin": case.base,
               "template": {"version": 1, "parameters": ["case_id", "view"]}})
    );
    assert_eq!(status["harpoon"]["routable"], true, "{status}");
    let status = status.to_string();
    assert!(!status.contains("casestatus") && !status.contains("canary"), "{status}");

    let metrics = case.rig.metrics().await;
    let calls = format!("tunnelgate_harpoon_calls_total{{label=\"{LABEL}\",outcome=\"success\",status_class=\"2xx\"}}");
    assert_eq!(series(&metrics, &calls), 1, "{metrics}");
    assert!(!metrics.contains("case-secret-canary") && !metrics.contains("CASE-123"));
    let log = case.gw.stderr();
    assert!(log.contains("harpoon template request completed"), "{log}");
    for hidden in ["CASE-123", "case-secret-canary", "complaints=full", "tag-7"] {
        assert!(!log.contains(hidden), "the log shows {hidden:?}: {log}");
    }
    case.stop().await;
}

/// Calls refused after the template is known: each text after `label get_case_status: `.
#[rustfmt::skip]
fn checked_refusals() -> Vec<(Value, &'static str)> {
    let keys = "template parameter keys must match the declared schema";
    let forbidden = "template parameter case_id: contains forbidden characters or path segments";
    let routing = "routing and identity headers are forbidden for templates";
    let header_name = "invalid or forbidden template header name";
    vec![
        (with("parameters", json!({"case_id": "CASE-9"})), keys),
        (with_parameter("extra", json!("x")), keys),
        (with_parameter("view", json!(5)), "template parameter view must be a string"),
        (with_parameter("case_id", json!("../x")), forbidden),
        (with_parameter("case_id", json!("a b")), forbidden),
        (with_parameter("case_id", json!("CASE%2F1")), forbidden),
        (with_parameter("case_id", json!("ADMIN")), "template parameter case_id: is reserved"),
        (with_parameter("case_id", json!("CASE.1")), "template parameter case_id: does not match its pattern"),
        (with_parameter("view", json!("medium")), "template parameter view: is outside its enum"),
        (with_parameter("case_id", json!("C".repeat(65))), "template parameter case_id: identifier length is outside its bounds"),
        (with("headers", json!({"X-Forwarded-For": "203.0.113.9"})), routing),
        (with("headers", json!({"Host": "evil.example"})), routing),
        (with("headers", json!({"ApiKey": "k"})), header_name),
        (with("headers", json!({"Authorization": "Basic eDp5"})), header_name),
        (with("headers", json!({"X-Other": "1"})), "caller header is not permitted by the target"),
        (with("headers", json!({"X-Request-Tag": "1", "x-request-tag": "2"})), "duplicate caller header name"),
        (with("headers", json!({"X-Request-Tag": "a\u{1}b"})), "invalid caller header value"),
        (with("timeout_ms", json!(50)), "timeout must be at least 100ms"),
        (with("timeout_ms", json!(0)), "timeout must be positive"),
        (with("timeout_ms", json!(120_001)), "timeout must be at most 120000ms"),
        (with("max_response_bytes", json!(999_999_999)), "max_response_bytes must be less than or equal to 102400"),
        (with("max_response_bytes", json!(0)), "max_response_bytes must be positive"),
    ]
}

/// `arguments` as sent, byte for byte (`None`: no `arguments` at all), each refused as
/// `label unknown: invalid template arguments`.
fn raw_refusals() -> Vec<Option<String>> {
    let parameters = r#"{"case_id":"CASE-9","view":"short"}"#;
    let mut raw = vec![
        None,
        Some("null".to_owned()),
        Some("[]".to_owned()),
        Some(format!(
            r#"{{"label":"{LABEL}","label":"{LABEL}","parameters":{parameters}}}"#
        )),
        Some(format!(
            r#"{{"label":"{LABEL}","parameters":{{"case_id":"CASE-9","case_id":"CASE-8","view":"short"}}}}"#
        )),
    ];
    let mut label_cased = valid("CASE-9");
    label_cased["Label"] = json!(LABEL);
    let mut no_parameters = valid("CASE-9");
    no_parameters.as_object_mut().unwrap().remove("parameters");
    for arguments in [
        label_cased,
        no_parameters,
        with("parameters", json!("CASE-9")),
        with("label", json!("Get_Case_Status")),
        with("headers", json!({"Accept": 1})),
        with("timeout_ms", json!(150.5)),
        with_parameter("case_id", json!({"a": {"b": {}}})),
    ] {
        raw.push(Some(arguments.to_string()));
    }
    raw
}

#[tokio::test]
async fn every_refused_template_call_is_a_tool_error_in_upstreams_words_and_reaches_nothing() {
    let case = start().await;
    let checked = checked_refusals();
    for (arguments, words) in &checked {
        let result = case.template(arguments.clone()).await;
        assert_eq!(refusal(&result), format!("label {LABEL}: {words}"), "{arguments}");
    }
    let raw = raw_refusals();
    for (i, arguments) in raw.iter().enumerate() {
        let arguments = arguments
            .as_ref()
            .map_or(String::new(), |a| format!(r#","arguments":{a}"#));
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":"raw-{i}","method":"tools/call","params":{{"name":"call_target_template"{arguments}}}}}"#
        );
        let cmd = NewCommand::jsonrpc_raw(serde_json::value::RawValue::from_string(message.clone()).unwrap());
        let answer = case.send(cmd).await;
        assert!(answer["error"].is_null(), "never -32602: {answer}");
        let text = refusal(&answer["result"]);
        assert_eq!(text, "label unknown: invalid template arguments", "{message}");
    }
    // No template by that label: an unknown one, and an exact-URL target's.
    for label in ["nowhere", "landing"] {
        let result = case.template(with("label", json!(label))).await;
        assert_eq!(refusal(&result), "label unknown: unknown template target", "{label}");
    }
    let result = case.tool("call_target", json!({"label": LABEL, "method": "GET"})).await;
    let words = "template target requires call_target_template";
    assert_eq!(refusal(&result), format!("label {LABEL}: {words}"));

    // A call that is allowed reaches the peer: the log is read after it, so nothing
    // refused above can still be on its way.
    let (structured, _) = case.answered(valid("CASE-9")).await;
    assert_eq!(structured["status_code"], 200, "{structured}");
    assert_eq!(seen_n(&case.peer, 1).await, ["GET /casestatus/CASE-9"]);

    let metrics = case.rig.metrics().await;
    let refused = |reason: &str| refusals(&metrics, reason);
    let invalid_arguments = (checked.len() + raw.len()) as u64;
    assert_eq!(refused("invalid_template_arguments"), invalid_arguments, "{metrics}");
    assert_eq!(refused("unknown_target"), 2, "{metrics}");
    assert_eq!(refused("template_requires_template_tool"), 1, "{metrics}");
    let invalid =
        format!("tunnelgate_harpoon_calls_total{{label=\"{LABEL}\",outcome=\"invalid_input\",status_class=\"none\"}}");
    assert_eq!(series(&metrics, &invalid), checked.len() as u64 + 1, "{metrics}");
    assert!(!case.gw.stderr().contains("203.0.113.9"), "a refused value in the log");
    case.stop().await;
}

#[tokio::test]
async fn a_redirect_is_the_result_never_followed_and_a_body_over_the_limit_is_an_error() {
    let case = start().await;
    // Same origin and a configured target's URL: still never followed, never rewritten.
    let (kept, body) = case
        .answered(json!({"label": "case_hop", "parameters": {"case_id": "HOP-1"}}))
        .await;
    assert_eq!(kept["status_code"], 302, "{kept}");
    assert_eq!(
        kept["headers"]["Location"][0],
        format!("{}/landing", case.base),
        "{kept}"
    );
    assert!(body.is_empty() && kept.get("body_base64").is_none(), "{kept}");

    let big = case
        .template(json!({"label": "case_big", "parameters": {"case_id": "BIG-1"}}))
        .await;
    assert_eq!(refusal(&big), "label case_big: response exceeds size limit");
    let small = case.template(with("max_response_bytes", json!(16))).await;
    assert_eq!(refusal(&small), format!("label {LABEL}: response exceeds size limit"));
    let (fits, _) = case.answered(valid("CASE-9")).await;
    assert_eq!(fits["status_code"], 200, "{fits}");

    assert_eq!(
        seen_n(&case.peer, 4).await.join(", "),
        "GET /hop, GET /big, GET /casestatus/CASE-9, GET /casestatus/CASE-9",
        "one request per call; the redirect's Location was never dialled"
    );
    let metrics = case.rig.metrics().await;
    assert_eq!(refusals(&metrics, "response_too_large"), 2, "{metrics}");
    let redirected = "tunnelgate_harpoon_calls_total{label=\"case_hop\",outcome=\"success\",status_class=\"3xx\"}";
    assert_eq!(series(&metrics, redirected), 1, "{metrics}");
    case.stop().await;
}

/// A parameter the policy declares and never uses.
const SPARE: &str =
    "max_length = 8\n[harpoon.targets.template.parameters.spare]\ntype = \"string\"\nrequired = true\nenum = [\"a\"]\nmax_length = 4\n";

/// Edits of [`case_status`] the start refuses: the text replaced, its replacement, the
/// key after `harpoon.targets[0].template` and words of the problem.
#[rustfmt::skip]
const BAD_POLICIES: [(&str, &str, &str, &str); 13] = [
    ("'^[A-Za-z0-9_-]+$'", "'(?i)^[a-z0-9_-]+$'", ".parameters.case_id.pattern", "inline flag"),
    ("'^[A-Za-z0-9_-]+$'", r"'^\p{L}+$'", ".parameters.case_id.pattern", r"\p"),
    ("max_length = 8\n", SPARE, ".parameters.spare", "used in neither path_template nor query"),
    ("follow_redirects = false", "follow_redirects = true", ".follow_redirects", "never follow redirects"),
    ("description = \"case status\"\n", "description = \"x\"\nurl = \"http://127.0.0.1:9/x\"\n", "", "not both"),
    ("allow_plaintext_http = true\n", "", ".origin", "allow_plaintext_http"),
    ("origin = \"http://127.0.0.1:9\"", "origin = \"http://127.0.0.1:9/v1\"", ".origin", "path"),
    ("origin = \"http://127.0.0.1:9\"", "origin = \"http://u:p@127.0.0.1:9\"", ".origin", "credentials"),
    ("method = \"GET\"", "method = \"POST\"", ".method", "GET"),
    ("/casestatus/{case_id}", "/casestatus/id-{case_id}", ".path_template", "whole {parameter}"),
    ("\"X-Request-Tag\"]", "\"X-Api-Key\"]", ".allowed_headers[1]", "X-Api-Key"),
    ("examples = [\"CASE-123\"]", "examples = [\"CASE.123\"]", ".parameters.case_id.examples", "pattern"),
    ("max_length = 64", "max_length = 300", ".parameters.case_id.max_length", "1 to 256"),
];

#[tokio::test]
async fn a_bad_template_policy_refuses_the_start_with_exit_78_naming_the_key() {
    let rig = Rig::start("").await;
    let policy = only_case_status(&rig, "http://127.0.0.1:9");
    let config = |extra: &str| {
        rig.config(&RigOptions {
            extra,
            ..RigOptions::default_mode()
        })
    };
    // The policy as written is valid: each edit below is what the start refuses.
    let check = Gateway::cli(&["check"], Some(&config(&policy)), &[], EXIT).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    let key = |field: &str| format!("harpoon.targets[0].template{field}");
    for (from, to, field, words) in BAD_POLICIES {
        let bad = policy.replace(from, to);
        assert_ne!(bad, policy, "the edit {from:?} applies");
        let mut gw = Gateway::run(&config(&bad));
        let code = gw.wait_exit(EXIT).await;
        let stderr = gw.stderr();
        assert_eq!(code, Some(78), "{from:?} -> {to:?}: {stderr}");
        assert!(stderr.contains(&key(field)), "{} in {stderr}", key(field));
        assert!(stderr.contains(words), "{words:?} in {stderr}");
        assert!(!stderr.contains("case-secret-canary"), "{stderr}");
    }
}

/// A template `GET` written to an origin that never answers may have been read and
/// acted on: strict mode latches on it as on any leg whose effect is unknown.
#[tokio::test]
async fn in_strict_mode_a_template_call_written_and_never_answered_latches_downstream_ambiguous() {
    // A target that reads a request and never answers.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://127.0.0.1:{}", hole.local_addr().unwrap().port());
    let (read_tx, mut read_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut conn, _)) = hole.accept().await {
            let mut buf = vec![0u8; 65536];
            let n = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await.unwrap_or(0);
            let _ = read_tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            held.push(conn);
        }
    });
    let rig = Rig::start("").await;
    let extra = only_case_status(&rig, &origin);
    let options = RigOptions {
        extra: &extra,
        ..RigOptions::default()
    };
    let config = rig.config(&options);
    let mut gw = rig.spawn_gateway(&config).await;
    let mut arguments = valid("CASE-5");
    arguments["timeout_ms"] = json!(500);
    let id = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "call_target_template", "arguments": arguments}}))
        .channel("harpoon"),
    );
    let rec = rig.wait("the abandoned call answered", |r| r.is_completed(&id)).await;
    let result = &final_json(&rec, &id)["resp_json"]["result"];
    let text = refusal(result);
    assert!(
        text.starts_with(&format!("label {LABEL}: template request failed: "))
            && text.contains("may have reached the target"),
        "{result}"
    );
    let request = read_rx.try_recv().expect("the request was written to the origin");
    assert!(
        request.starts_with("GET /casestatus/CASE-5?complaints=short&elevations=true HTTP/1.1\r\n"),
        "{request}"
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    let latch: Value = serde_json::from_str(&std::fs::read_to_string(rig.latch_path()).unwrap()).unwrap();
    assert_eq!(latch["fatal"]["category"], "downstream_ambiguous", "{latch}");
    assert_eq!(latch["fatal"]["channel"], "harpoon", "{latch}");
    let receipts = Gateway::cli(&["receipts"], Some(&config), &[], EXIT).await;
    let abandoned = receipts
        .stdout
        .lines()
        .find(|l| l.contains(" harpoon "))
        .unwrap_or_default();
    assert!(
        abandoned.contains("abandoned") && abandoned.contains("downstream_ambiguous"),
        "{receipts:?}"
    );
    let shown = format!("{}{}", receipts.stdout, gw.stderr());
    for hidden in ["CASE-5", "casestatus", "complaints", "canary"] {
        assert!(
            !shown.contains(hidden),
            "{hidden:?} in the receipts or the log: {shown}"
        );
    }
}

#[tokio::test]
async fn doctor_checks_a_template_at_its_origin_naming_its_parameters_and_never_renders_it() {
    let (peer, ready) = spawn_py_oauth_server("redirect").await;
    let base = ready.trim_end_matches("/mcp").to_owned();
    let rig = Rig::start("").await;
    let extra = policy(&rig, &base);
    // `ops.listen` on port 0: nothing holds it while doctor checks it.
    let config = rig
        .config(&RigOptions {
            extra: &extra,
            ..RigOptions::default_mode()
        })
        .replace(&format!("127.0.0.1:{}", rig.ops_port), "127.0.0.1:0");
    let doctor = Gateway::cli(&["doctor"], Some(&config), &[], EXIT).await;
    let line = |name: &str| {
        doctor
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in\n{}", doctor.stdout))
            .to_owned()
    };
    let template = line("harpoon.get_case_status");
    assert!(template.starts_with("ok"), "{template}");
    assert!(
        template.contains(&format!(
            "template v1 (GET, parameters: case_id, view; no redirects): {base}/ answered HTTP "
        )),
        "{template}"
    );
    let hop = line("harpoon.case_hop");
    assert!(
        hop.starts_with("ok") && hop.contains("template v1 (GET, parameters: case_id; no redirects)"),
        "{hop}"
    );
    assert_eq!(doctor.code, 0, "{}\n{}", doctor.stdout, doctor.stderr);
    for hidden in ["casestatus", "/hop", "/big", "case-secret-canary"] {
        assert!(!doctor.stdout.contains(hidden), "{hidden:?} in\n{}", doctor.stdout);
    }
    // Four targets probed: `landing` at its URL, each template at its origin's root only.
    let probed = seen_n(&peer, 4).await;
    let at_root = probed.iter().filter(|l| l.ends_with(" /")).count();
    assert!(at_root >= 3, "{probed:?}");
    assert!(
        probed.iter().all(|l| l.ends_with(" /") || l.ends_with(" /landing")),
        "a template's path was requested: {probed:?}"
    );
}
