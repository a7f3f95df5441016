//! The control-plane wire contract as executable validators.
//!
//! Loads `contract/openapi.json` and `contract/openapi-2026-08-25.json` (the vendored,
//! unchanged upstream contracts) and validates bodies against the schemas of both with the `jsonschema` crate (draft 2020-12, as OpenAPI 3.1
//! uses): response POST bodies (`TunnelResponsePayload`, plus the nested
//! `x-tunnel-failure-schema` for a synthesized `error.data.tunnel_failure`), poll bodies
//! (`PolledCommandList`) and acks (`TunnelResponseAck`). Every body the gateway sends and
//! every body the simulator produces goes through these in the black-box tests.
//!
//! One observed extension is applied, as `contract/README.md` documents it: the
//! `oauth_discovery_response` value of `ResponsePayloadType`, whose body is checked
//! against a copy of the schemas with that one value added, plus its documented shape.

use std::path::PathBuf;
use std::sync::LazyLock;

use jsonschema::Validator;
use serde_json::{json, Value};
use tunnelgate_protocol::{decode_poll, CommandKind};

/// The vendored `contract/` folder of the repository.
pub(crate) fn contract_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contract")
}

/// The vendored contracts, oldest first: what the service published with the official
/// client 0.0.13, and the 2026-08-25 one. Every body is checked against both.
pub(crate) const CONTRACTS: [&str; 2] = ["openapi.json", "openapi-2026-08-25.json"];

/// The parsed contract `file` (one of [`CONTRACTS`]).
pub(crate) fn contract(file: &str) -> &'static Value {
    static PARSED: LazyLock<Vec<(&'static str, Value)>> = LazyLock::new(|| {
        CONTRACTS
            .iter()
            .map(|file| {
                let path = contract_dir().join(file);
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                (
                    *file,
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file} is not JSON: {e}")),
                )
            })
            .collect()
    });
    &PARSED.iter().find(|(f, _)| *f == file).expect("a vendored contract").1
}

/// The parsed `openapi.json` (the 0.0.13 contract).
pub(crate) fn openapi() -> &'static Value {
    contract(CONTRACTS[0])
}

/// A fixture from `contract/fixtures/`, as bytes.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = contract_dir().join("fixtures").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

struct Validators {
    response: Validator,
    /// `TunnelResponsePayload` with `oauth_discovery_response` added to its `resp_type`.
    discovery_response: Validator,
    poll: Validator,
    ack: Validator,
    tunnel_failure: Validator,
}

/// The validators of each vendored contract, in [`CONTRACTS`] order.
fn all_validators() -> &'static [(&'static str, Validators)] {
    static VALIDATORS: LazyLock<Vec<(&'static str, Validators)>> = LazyLock::new(|| {
        CONTRACTS
            .iter()
            .map(|file| {
                let openapi = contract(file);
                let schemas = &openapi["components"]["schemas"];
                let failure =
                    schemas["TunnelResponsePayload"]["properties"]["resp_json"]["x-tunnel-failure-schema"].clone();
                assert!(failure.is_object(), "{file} has no x-tunnel-failure-schema");
                let validators = Validators {
                    response: component_validator(openapi, "TunnelResponsePayload"),
                    discovery_response: extended_validator(openapi, "TunnelResponsePayload"),
                    poll: component_validator(openapi, "PolledCommandList"),
                    ack: component_validator(openapi, "TunnelResponseAck"),
                    tunnel_failure: build(&failure, "x-tunnel-failure-schema"),
                };
                (*file, validators)
            })
            .collect()
    });
    &VALIDATORS
}

/// `instance` checked by the validator `pick` chooses, in every vendored contract.
fn check_all(pick: impl Fn(&Validators) -> &Validator, instance: &Value, what: &str) -> Result<(), String> {
    for (file, validators) in all_validators() {
        check(pick(validators), instance, what).map_err(|e| format!("{file}: {e}"))?;
    }
    Ok(())
}

/// A validator for `#/components/schemas/{name}`: a root document that refers to it and
/// carries `components`, so that nested `$ref`s resolve inside the same document.
fn component_validator(openapi: &Value, name: &str) -> Validator {
    let components = &openapi["components"];
    assert!(
        components["schemas"][name].is_object(),
        "openapi.json has no schema {name}"
    );
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": components,
    });
    build(&root, name)
}

/// As [`component_validator`], over the schemas with the observed extension applied:
/// `oauth_discovery_response` added to `ResponsePayloadType`.
fn extended_validator(openapi: &Value, name: &str) -> Validator {
    let mut components = openapi["components"].clone();
    components["schemas"]["ResponsePayloadType"]["enum"]
        .as_array_mut()
        .expect("ResponsePayloadType is an enum")
        .push(json!(OAUTH_DISCOVERY_RESPONSE));
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": components,
    });
    build(&root, name)
}

/// The observed extension's response type (`contract/README.md`).
pub(crate) const OAUTH_DISCOVERY_RESPONSE: &str = "oauth_discovery_response";

/// The `error.code` values of a failed discovery's answer (`contract/README.md`).
pub(crate) const DISCOVERY_ERROR_CODES: [&str; 6] = [
    "unsupported_channel",
    "metadata_not_found",
    "invalid_metadata",
    "server_unreachable",
    "not_executed",
    "discovery_timeout",
];

fn build(schema: &Value, what: &str) -> Validator {
    jsonschema::draft202012::options()
        .build(schema)
        .unwrap_or_else(|e| panic!("compile schema {what}: {e}"))
}

fn check(validator: &Validator, instance: &Value, what: &str) -> Result<(), String> {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at '{}'", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{what}: {}", errors.join("; ")))
    }
}

fn parse(bytes: &[u8], what: &str) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{what} is not JSON: {e}"))
}

/// Validates a `POST .../response` body: the `TunnelResponsePayload` schema (which pins
/// `resp_type` to the `ResponsePayloadType` enum and forbids extra fields), `resp_type`
/// present (the gateway always states it, though the schema has a default), and, when
/// `resp_json.error.data.tunnel_failure` exists, the published `x-tunnel-failure-schema`.
pub(crate) fn validate_response_body(bytes: &[u8]) -> Result<(), String> {
    let body = parse(bytes, "response body")?;
    if body.get("resp_type").and_then(Value::as_str) == Some(OAUTH_DISCOVERY_RESPONSE) {
        check_all(|v| &v.discovery_response, &body, "TunnelResponsePayload (extended)")?;
        return validate_discovery_shape(&body);
    }
    check_all(|v| &v.response, &body, "TunnelResponsePayload")?;
    if body.get("resp_type").is_none() {
        return Err("TunnelResponsePayload: resp_type is missing".to_owned());
    }
    if let Some(failure) = body.pointer("/resp_json/error/data/tunnel_failure") {
        validate_tunnel_failure(failure)?;
    }
    Ok(())
}

/// The documented shape of an `oauth_discovery_response`: protected-resource metadata
/// (an object with a non-empty `resource`) on a success status, or the error object with
/// a known `code` on an error status.
fn validate_discovery_shape(body: &Value) -> Result<(), String> {
    let what = "oauth_discovery_response";
    let json = body
        .get("resp_json")
        .filter(|j| j.is_object())
        .ok_or_else(|| format!("{what}: resp_json is not an object"))?;
    let code = body["resp_code"].as_i64().unwrap_or_default();
    if code >= 400 && json.get("resource").is_none() {
        let error = &json["error"];
        for field in ["message", "type", "code"] {
            if !error[field].is_string() {
                return Err(format!("{what}: error.{field} is not a string"));
            }
        }
        let code = error["code"].as_str().unwrap_or_default();
        if !DISCOVERY_ERROR_CODES.contains(&code) {
            return Err(format!("{what}: error.code `{code}` is not a documented one"));
        }
        return Ok(());
    }
    match json.get("resource").and_then(Value::as_str) {
        Some(r) if !r.is_empty() => Ok(()),
        _ => Err(format!("{what}: metadata without a non-empty resource")),
    }
}

/// Validates `error.data.tunnel_failure` against `x-tunnel-failure-schema`.
pub(crate) fn validate_tunnel_failure(failure: &Value) -> Result<(), String> {
    check_all(|v| &v.tunnel_failure, failure, "tunnel_failure")
}

/// Validates a `200` poll body against `PolledCommandList`.
pub(crate) fn validate_poll_body(bytes: &[u8]) -> Result<(), String> {
    let body = parse(bytes, "poll body")?;
    check_all(|v| &v.poll, &body, "PolledCommandList")
}

/// Validates a response-POST acknowledgement against `TunnelResponseAck`.
pub(crate) fn validate_ack_body(bytes: &[u8]) -> Result<(), String> {
    let body = parse(bytes, "ack body")?;
    check_all(|v| &v.ack, &body, "TunnelResponseAck")
}

#[test]
fn poll_fixture_validates_and_decodes_into_both_commands() {
    let body = fixture("poll_command_envelope.json");

    validate_poll_body(&body).unwrap();
    let commands = decode_poll(&body).expect("the fixture decodes");

    assert_eq!(commands.len(), 2);
    let first = commands[0].as_ref().expect("first command is valid");
    assert_eq!(first.request_id.as_str(), "cmd_fixture_jsonrpc");
    assert_eq!(first.channel.as_str(), "harpoon");
    match &first.kind {
        CommandKind::JsonRpc(payload) => assert_eq!(payload.method(), Some("tools/list")),
        other => panic!("expected a jsonrpc command, got {other:?}"),
    }
    let second = commands[1].as_ref().expect("second command is valid");
    assert!(
        matches!(second.kind, CommandKind::SessionTermination),
        "{:?}",
        second.kind
    );
}

#[test]
fn notify_fixture_validates_as_a_response_body() {
    validate_response_body(&fixture("jsonrpc_notify_response.json")).unwrap();
}

#[test]
fn ack_validator_accepts_ok_and_rejects_another_status() {
    validate_ack_body(br#"{"status":"ok"}"#).unwrap();
    assert!(validate_ack_body(br#"{"status":"accepted"}"#).is_err());
}

#[test]
fn response_body_with_an_extra_field_is_rejected() {
    let body = br#"{"request_id":"r1","channel":"main","resp_code":200,"resp_type":"notify_ack","shard_token":"s"}"#;

    let err = validate_response_body(body).unwrap_err();

    assert!(err.contains("shard_token"), "{err}");
}

#[test]
fn response_body_with_an_unknown_resp_type_is_rejected() {
    let body = br#"{"request_id":"r1","channel":"main","resp_code":200,"resp_type":"jsonrpc_final"}"#;

    assert!(validate_response_body(body).is_err());
}

#[test]
fn discovery_answers_validate_only_in_their_documented_shapes() {
    let found = br#"{"request_id":"r1","channel":"main","resp_json":{"resource":"https://h/mcp"},"resp_headers":{"Content-Type":["application/json"]},"resp_code":200,"resp_type":"oauth_discovery_response"}"#;
    validate_response_body(found).unwrap();
    let failed = br#"{"request_id":"r1","channel":"main","resp_json":{"error":{"message":"m","type":"server_error","code":"discovery_timeout"}},"resp_headers":{},"resp_code":504,"resp_type":"oauth_discovery_response"}"#;
    validate_response_body(failed).unwrap();
    for bad in [
        // not metadata
        &br#"{"request_id":"r1","channel":"main","resp_json":{"x":1},"resp_code":200,"resp_type":"oauth_discovery_response"}"#[..],
        // an undocumented error code
        br#"{"request_id":"r1","channel":"main","resp_json":{"error":{"message":"m","type":"t","code":"oops"}},"resp_code":502,"resp_type":"oauth_discovery_response"}"#,
        // no body at all
        br#"{"request_id":"r1","channel":"main","resp_code":404,"resp_type":"oauth_discovery_response"}"#,
        // the vendored schema still holds: no extra fields
        br#"{"request_id":"r1","resp_json":{"resource":"r"},"resp_code":200,"resp_type":"oauth_discovery_response","x":1}"#,
    ] {
        assert!(validate_response_body(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn the_library_error_codes_are_the_documented_ones() {
    use tunnelgate_protocol::DiscoveryFailure;
    let codes: Vec<_> = DiscoveryFailure::ALL.iter().map(|f| f.code()).collect();
    assert_eq!(codes.len(), DISCOVERY_ERROR_CODES.len());
    for code in codes {
        assert!(DISCOVERY_ERROR_CODES.contains(&code), "{code}");
    }
}

#[test]
fn response_body_without_resp_type_is_rejected() {
    let body = br#"{"request_id":"r1","channel":"main","resp_code":202}"#;

    assert!(validate_response_body(body).is_err());
}

fn failure_body(failure: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "request_id": "r1",
        "channel": "main",
        "resp_json": {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32603, "message": "MCP server unavailable", "data": {"tunnel_failure": failure}},
        },
        "resp_headers": {},
        "resp_code": 502,
        "resp_type": "jsonrpc_response",
    }))
    .expect("a JSON value serializes")
}

#[test]
fn target_http_failure_with_its_upstream_status_is_accepted() {
    let body = failure_body(
        json!({"version": 1, "source": "target_http", "upstream_response_received": true, "upstream_status": 502}),
    );

    validate_response_body(&body).unwrap();
}

#[test]
fn target_http_failure_without_upstream_status_is_rejected() {
    let body = failure_body(json!({"version": 1, "source": "target_http", "upstream_response_received": true}));

    let err = validate_response_body(&body).unwrap_err();

    assert!(err.starts_with("openapi.json: tunnel_failure"), "{err}");
}

#[test]
fn transport_closed_failure_claiming_a_response_is_rejected() {
    let body = failure_body(json!({"version": 1, "source": "transport_closed", "upstream_response_received": true}));

    assert!(validate_response_body(&body).is_err());
}

#[test]
fn body_built_by_the_library_with_a_synthesized_error_validates() {
    use std::collections::BTreeMap;
    use tunnelgate_protocol::{
        synthesize_error, ChannelName, FailureSource, RequestId, RespType, ResponseBody, TunnelFailure,
    };

    let id = serde_json::value::RawValue::from_string("7".to_owned()).unwrap();
    let failure = TunnelFailure::new(FailureSource::Connect, Some("connection_refused"), false, None);
    let error = synthesize_error(Some(&id), "MCP server unreachable", &failure);
    let headers = BTreeMap::new();
    let body = ResponseBody {
        request_id: &RequestId::new("r1"),
        channel: &ChannelName::main(),
        resp_json: Some(&error),
        resp_headers: &headers,
        resp_code: 502,
        resp_type: RespType::JsonrpcResponse,
        resp_timing: None,
    };

    validate_response_body(&body.to_bytes()).unwrap();
}

#[test]
fn the_wire_version_the_gateway_sends_is_the_newest_contract_s_on_every_operation() {
    let newest = contract(CONTRACTS[1]);
    let mut operations = 0;
    for (path, item) in newest["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let Some(parameters) = operation["parameters"].as_array() else {
                continue;
            };
            operations += 1;
            let wire = parameters
                .iter()
                .find(|p| p["name"] == "X-Tunnel-Client-Wire-Protocol-Version")
                .unwrap_or_else(|| panic!("{method} {path} names no wire version"));
            assert_eq!(wire["in"], "header");
            assert_eq!(
                wire["example"],
                tunnelgate_protocol::WIRE_PROTOCOL_VERSION,
                "{method} {path}"
            );
        }
    }
    assert_eq!(operations, 4, "the contract's four operations");
    assert!(
        !openapi().to_string().contains("X-Tunnel-Client-Wire-Protocol-Version"),
        "the 0.0.13 contract has no wire version"
    );
}
