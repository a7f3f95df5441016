//! `harpoon.targets[i].template`: Harpoon target templates, validated at load so that a
//! bad policy stops the gateway with its key and its problem.

use super::*;
use crate::config::{HarpoonTemplate, TemplatePart, ValueRule};

/// The fixed header's value, given through the environment; it must show nowhere.
const AUTH: &str = "Bearer s3cr3t-template-value";

/// The template the tests start from: a pattern parameter in the path, an enum
/// parameter in the query, a fixed query value, a fixed header from the environment
/// and two caller-allowed headers (written out of order and case).
const TEMPLATE: &str = r#"
version = 1
origin = "https://Cases.Example:8443/"
method = "GET"
path_template = "/casestatus/{case_id}/v1"
follow_redirects = false
allowed_headers = ["x-request-TAG", "accept"]

[query]
zeta = "true"
alpha = "{kind}"

[headers]
authorization = "env:CASE_AUTH"

[parameters.kind]
type = "string"
required = true
enum = ["open", "closed"]
max_length = 16
min_length = 2

[parameters.case_id]
type = "string"
required = true
pattern = '^[A-Za-z0-9_-]+$'
max_length = 64
reserved_values = ["all", "admin"]
examples = ["CASE-123"]
description = "The case."
"#;

/// Sets the dotted `key` of `table` to the TOML `value`, or removes it when `value`
/// is `""` (as [`toml_with`] does for the whole configuration).
fn set(table: &mut toml::Table, key: &str, value: &str) {
    let (parents, leaf) = key.rsplit_once('.').map_or(("", key), |(p, l)| (p, l));
    let mut node = table;
    for part in parents.split('.').filter(|p| !p.is_empty()) {
        node = node
            .entry(part)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("edits descend through tables");
    }
    if value.is_empty() {
        node.remove(leaf);
    } else {
        let parsed: toml::Table = toml::from_str(&format!("v = {value}")).expect("edit value is TOML");
        node.insert(leaf.to_owned(), parsed["v"].clone());
    }
}

/// [`TEMPLATE`] with `edits` applied (keys relative to the template).
fn template_table<K: AsRef<str>, V: AsRef<str>>(edits: &[(K, V)]) -> toml::Table {
    let mut table: toml::Table = toml::from_str(TEMPLATE).expect("TEMPLATE is valid TOML");
    for (key, value) in edits {
        set(&mut table, key.as_ref(), value.as_ref());
    }
    table
}

fn target(label: &str, template: toml::Table) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("label".into(), toml::Value::String(label.into()));
    t.insert("template".into(), toml::Value::Table(template));
    t
}

fn exact(label: &str) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("label".into(), toml::Value::String(label.into()));
    t.insert("url".into(), toml::Value::String("https://h.example/x".into()));
    t
}

/// [`MINIMAL`] with `edits`, `harpoon.targets` set to `targets`, loaded with `pairs`.
fn load_targets(
    targets: Vec<toml::Table>,
    edits: &[(&str, &str)],
    pairs: &[(&str, &str)],
) -> Result<Config, ConfigError> {
    let mut root: toml::Table = toml::from_str(&toml_with(edits)).expect("toml_with writes TOML");
    let harpoon = root
        .entry("harpoon")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .expect("harpoon is a table");
    let list = targets.into_iter().map(toml::Value::Table).collect();
    harpoon.insert("targets".into(), toml::Value::Array(list));
    let text = toml::to_string(&root).expect("the configuration serializes");
    load(&text, &Overrides::default(), pairs)
}

/// One template target `case`: [`TEMPLATE`] with `edits`.
fn with_template<K: AsRef<str>, V: AsRef<str>>(edits: &[(K, V)]) -> Result<Config, ConfigError> {
    load_targets(vec![target("case", template_table(edits))], &[], &[("CASE_AUTH", AUTH)])
}

fn only_template(config: &Config) -> &HarpoonTemplate {
    assert_eq!(config.harpoon.templates.len(), 1, "{:?}", config.harpoon);
    &config.harpoon.templates[0]
}

/// Asserts that `edits` are refused at `harpoon.targets[0].template.FIELD` with a
/// problem containing `words`, and that the error never shows the fixed header.
fn refused<K: AsRef<str>, V: AsRef<str>>(edits: &[(K, V)], field: &str, words: &str) {
    let error = match with_template(edits) {
        Ok(config) => panic!("{field}: should be refused, loaded {:?}", config.harpoon.templates),
        Err(e) => e,
    };
    assert_eq!(error.key(), format!("harpoon.targets[0].template.{field}"), "{error}");
    assert!(error.problem().contains(words), "{field}: wanted {words:?} in {error}");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
}

/// A `parameters` table of `max_lengths.len()` parameters `p00`, `p01`, ... with those
/// `max_length`s, and a path using each in its own segment.
fn many_parameters(max_lengths: &[usize]) -> Vec<(String, String)> {
    let names: Vec<String> = (0..max_lengths.len()).map(|i| format!("p{i:02}")).collect();
    let table: Vec<String> = names
        .iter()
        .zip(max_lengths)
        .map(|(name, max)| {
            format!("{name} = {{ type = \"string\", required = true, max_length = {max}, pattern = \"[a-z]+\" }}")
        })
        .collect();
    let path: String = names.iter().map(|n| format!("/{{{n}}}")).collect();
    vec![
        ("parameters".into(), format!("{{ {} }}", table.join(", "))),
        ("path_template".into(), format!("{path:?}")),
        ("query".into(), String::new()),
    ]
}

#[test]
fn a_valid_template_loads_in_canonical_form() {
    let config = with_template::<&str, &str>(&[]).expect("the template is valid");
    assert!(config.harpoon.targets.is_empty(), "a template is not an exact target");
    let t = only_template(&config);
    assert_eq!((t.label.as_str(), t.version), ("case", 1));
    assert_eq!(t.origin, "https://cases.example:8443", "lower-case, no trailing /");
    assert_eq!(
        t.path,
        [
            TemplatePart::Literal("casestatus".into()),
            TemplatePart::Parameter("case_id".into()),
            TemplatePart::Literal("v1".into()),
        ]
    );
    assert_eq!(
        t.query,
        [
            ("alpha".to_owned(), TemplatePart::Parameter("kind".into())),
            ("zeta".to_owned(), TemplatePart::Literal("true".into())),
        ],
        "query keys sorted"
    );
    let names: Vec<&str> = t.parameters.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["case_id", "kind"], "parameters sorted by name");
    let case_id = &t.parameters[0];
    assert_eq!(
        (case_id.min_length, case_id.max_length),
        (1, 64),
        "min_length defaults to 1"
    );
    assert!(matches!(&case_id.rule, ValueRule::Pattern(p) if p.source == "^[A-Za-z0-9_-]+$"));
    assert_eq!(case_id.reserved_values, ["all", "admin"]);
    assert_eq!(case_id.examples, ["CASE-123"]);
    assert_eq!(case_id.description, "The case.");
    let kind = &t.parameters[1];
    assert_eq!((kind.min_length, kind.max_length), (2, 16));
    assert_eq!(kind.rule, ValueRule::Enum(vec!["open".into(), "closed".into()]));
    assert_eq!(t.headers.len(), 1);
    assert_eq!(t.headers[0].0, "Authorization", "fixed header names in canonical case");
    assert_eq!(t.headers[0].1.expose(), AUTH, "resolved from env:");
    assert_eq!(t.headers[0].1.describe(), "env:CASE_AUTH");
    assert_eq!(t.allowed_headers, ["Accept", "X-Request-Tag"], "canonical case, sorted");
    // 26 (origin) + 79 (path, case_id at 64) + 23 (?alpha=, kind at 16) + 10 (&zeta=true)
    assert_eq!(t.longest_url(), 138);
}

#[test]
fn the_fixed_header_value_is_shown_nowhere() {
    let config = with_template::<&str, &str>(&[]).unwrap();
    for (what, text) in [
        ("Debug of the config", format!("{config:?}")),
        ("Debug of the template", format!("{:?}", only_template(&config))),
        ("masked", config.masked()),
    ] {
        assert!(!text.contains("s3cr3t"), "{what} shows the fixed header: {text}");
    }
    assert!(config.masked().contains("env:CASE_AUTH"), "the reference is shown");
    let unset = load_targets(vec![target("case", template_table::<&str, &str>(&[]))], &[], &[]).unwrap_err();
    assert_eq!(
        unset.key(),
        "harpoon.targets[0].template.headers.authorization",
        "{unset}"
    );
    assert!(unset.problem().contains("CASE_AUTH is not set"), "{unset}");
}

#[test]
fn defaults_and_plaintext_http_with_its_switch_are_accepted() {
    let defaults = with_template(&[("version", ""), ("method", ""), ("follow_redirects", "")]).unwrap();
    assert_eq!(only_template(&defaults).version, 1);
    let plain = [("origin", "\"http://cases.example\"")];
    refused(&plain, "origin", "is plaintext http");
    let config = load_targets(
        vec![target("case", template_table(&plain))],
        &[("harpoon.allow_plaintext_http", "true")],
        &[("CASE_AUTH", AUTH)],
    )
    .unwrap();
    assert_eq!(only_template(&config).origin, "http://cases.example");
    let https_default_port = with_template(&[("origin", "\"https://cases.example:443\"")]).unwrap();
    assert_eq!(only_template(&https_default_port).origin, "https://cases.example");
}

#[test]
fn the_version_method_and_redirects_are_fixed() {
    refused(&[("version", "2")], "version", "must be 1");
    refused(&[("method", "\"POST\"")], "method", "GET requests only");
    refused(
        &[("follow_redirects", "true")],
        "follow_redirects",
        "never follow redirects",
    );
}

#[test]
fn a_target_has_a_url_or_a_template_not_both() {
    let mut both = target("case", template_table::<&str, &str>(&[]));
    both.insert("url".into(), toml::Value::String("https://h.example/x".into()));
    let error = load_targets(vec![both], &[], &[("CASE_AUTH", AUTH)]).unwrap_err();
    assert_eq!(error.key(), "harpoon.targets[0].template", "{error}");
    assert!(error.problem().contains("not both"), "{error}");
}

#[test]
fn the_origin_is_scheme_host_and_port_only() {
    for (origin, words) in [
        ("https://cases.example/api", "must not carry a path, query or fragment"),
        ("https://cases.example/?x=1", "must not carry a path, query or fragment"),
        ("https://cases.example?x=1", "must not carry a path, query or fragment"),
        ("https://cases.example/#f", "must not carry a path, query or fragment"),
        ("https://user:pw@cases.example", "must not carry credentials"),
        ("https://user@cases.example", "must not carry credentials"),
        ("http://cases.example", "is plaintext http"),
        ("ftp://cases.example", "must be an https URL"),
        ("cases.example", "is not a URL"),
        ("https://cases.example:0", "zero port"),
    ] {
        refused(&[("origin", format!("{origin:?}"))], "origin", words);
    }
    refused(&[("origin", "")], "origin", "is not a URL");
}

#[test]
fn a_template_declares_one_to_sixteen_parameters() {
    refused(
        &[("parameters", "")],
        "parameters",
        "must declare 1 to 16 parameters (found 0)",
    );
    refused(&many_parameters(&[8; 17]), "parameters", "(found 17)");
    let sixteen = with_template(&many_parameters(&[8; 16])).expect("16 parameters are allowed");
    assert_eq!(only_template(&sixteen).parameters.len(), 16);
}

#[test]
fn a_parameter_is_a_required_bounded_string_with_a_good_name() {
    let param = |rest: &str| {
        format!("{{ case_id = {{ type = \"string\", required = true, pattern = \"[a-z]+\"{rest} }}, kind = {{ type = \"string\", required = true, enum = [\"open\"], max_length = 8 }} }}")
    };
    refused(
        &[("parameters.1case", "{ type = \"string\" }")],
        "parameters.1case",
        "the name must match",
    );
    refused(
        &[("parameters.ca-se", "{ type = \"string\" }")],
        "parameters.ca-se",
        "the name must match",
    );
    refused(
        &[("parameters.case_id.type", "\"integer\"")],
        "parameters.case_id.type",
        "must be \"string\"",
    );
    refused(
        &[("parameters.case_id.type", "")],
        "parameters.case_id.type",
        "must be \"string\"",
    );
    refused(
        &[("parameters.case_id.required", "false")],
        "parameters.case_id.required",
        "must be true",
    );
    refused(
        &[("parameters.case_id.required", "")],
        "parameters.case_id.required",
        "must be true",
    );
    for max in ["", ", max_length = 0", ", max_length = 257", ", max_length = -1"] {
        refused(
            &[("parameters", param(max))],
            "parameters.case_id.max_length",
            "is required, 1 to 256",
        );
    }
    refused(
        &[("parameters.case_id.min_length", "65")],
        "parameters.case_id.min_length",
        "must be 1 to max_length (64)",
    );
    refused(
        &[("parameters.case_id.min_length", "0")],
        "parameters.case_id.min_length",
        "must be 1 to max_length",
    );
    let bounds = with_template(&[("parameters", param(", max_length = 256, min_length = 256"))]).unwrap();
    assert_eq!(only_template(&bounds).parameters[0].min_length, 256);
    refused(
        &[("parameters.case_id.description", format!("{:?}", "é".repeat(513)))],
        "parameters.case_id.description",
        "at most 1024 bytes",
    );
    with_template(&[("parameters.case_id.description", format!("{:?}", "é".repeat(512)))]).unwrap();
}

#[test]
fn a_parameter_takes_a_pattern_or_an_enum() {
    refused(
        &[("parameters.case_id.enum", "[\"a\"]")],
        "parameters.case_id",
        "not both",
    );
    refused(
        &[("parameters.case_id.pattern", "")],
        "parameters.case_id",
        "needs a pattern or an enum",
    );
    refused(
        &[("parameters.kind.enum", "[\"open\", \"..\"]")],
        "parameters.kind.enum",
        "\"..\" is not of",
    );
    refused(
        &[("parameters.kind.enum", "[\"a/b\"]")],
        "parameters.kind.enum",
        "is not of",
    );
    refused(
        &[("parameters.kind.enum", "[\"open\", \"open\"]")],
        "parameters.kind.enum",
        "distinct values",
    );
    refused(
        &[("parameters.kind.enum", "[]")],
        "parameters.kind.enum",
        "takes 1 to 64",
    );
    let many: Vec<String> = (0..65).map(|i| format!("\"v{i}\"")).collect();
    refused(
        &[("parameters.kind.enum", format!("[{}]", many.join(",")))],
        "parameters.kind.enum",
        "takes 1 to 64",
    );
}

#[test]
fn patterns_re2_reads_differently_are_refused() {
    for (pattern, words) in [
        ("(?i)case", "inline flag"),
        ("a(?=b)", "lookaround"),
        ("a(?!b)", "lookaround"),
        ("(?<=a)b", "lookaround"),
        (r"\Acase", r"`\A`"),
        (r"case\z", r"`\z`"),
        (r"\p{L}+", r"Unicode class `\p`"),
        (r"\PL+", r"Unicode class `\p`"),
        ("[[:alpha:]]+", "POSIX character class"),
        ("[^[:digit:]]+", "POSIX character class"),
        (r"\q", r"unknown escape `\q`"),
        ("", "must be 1 to 512 characters"),
        ("caf\u{e9}", "printable ASCII"),
    ] {
        refused(
            &[("parameters.case_id.pattern", format!("{pattern:?}"))],
            "parameters.case_id.pattern",
            words,
        );
    }
    refused(
        &[("parameters.case_id.pattern", format!("{:?}", "a".repeat(513)))],
        "parameters.case_id.pattern",
        "must be 1 to 512",
    );
    for invalid in ["(ab", "[a-", "a{2,1}"] {
        refused(
            &[("parameters.case_id.pattern", format!("{invalid:?}"))],
            "parameters.case_id.pattern",
            "is not a valid regular expression",
        );
    }
    with_template(&[("parameters.case_id.pattern", r#"'(?:CASE|case)-\d{1,6}'"#)]).unwrap();
}

#[test]
fn reserved_values_and_examples_are_bounded_and_valid() {
    refused(
        &[("parameters.case_id.reserved_values", "[\"all\", \"ALL\"]")],
        "parameters.case_id.reserved_values",
        "without regard to case",
    );
    refused(
        &[("parameters.case_id.reserved_values", "[\"a/b\"]")],
        "parameters.case_id.reserved_values",
        "each of A-Z",
    );
    let reserved: Vec<String> = (0..65).map(|i| format!("\"r{i}\"")).collect();
    let field = "parameters.case_id.reserved_values";
    refused(&[(field, format!("[{}]", reserved.join(",")))], field, "at most 64");
    with_template(&[(field, format!("[{}]", reserved[..64].join(",")))]).expect("64 reserved values");
    let nine: Vec<String> = (1..=9).map(|i| format!("\"CASE-{i}\"")).collect();
    let field = "parameters.case_id.examples";
    refused(&[(field, format!("[{}]", nine.join(",")))], field, "at most 8");
    refused(&[(field, "[\"A\", \"A\"]")], field, "distinct values");
    let own = ("parameters.case_id.pattern", "'^CASE-[0-9]+$'");
    refused(
        &[own, (field, "[\"CASE-1\", \"case-1\"]")],
        field,
        "\"case-1\" does not match its pattern",
    );
    refused(&[(field, "[\"Admin\"]")], field, "\"Admin\" is reserved");
    refused(&[(field, "[\"a.b/c\"]")], field, "contains forbidden characters");
    refused(
        &[(field, &*format!("[{:?}]", "x".repeat(65)))],
        field,
        "identifier length",
    );
    refused(
        &[("parameters.kind.examples", "[\"pending\"]")],
        "parameters.kind.examples",
        "is outside its enum",
    );
    with_template(&[(field, format!("[{}]", nine[..8].join(",")))]).expect("8 examples are allowed");
}

#[test]
fn every_placeholder_names_a_parameter_used_exactly_once() {
    let path = "path_template";
    refused(
        &[(path, "\"/casestatus/{x}\"")],
        path,
        "names {x}, which is not a declared parameter",
    );
    refused(
        &[(path, "\"/a/{case_id}/{case_id}\"")],
        path,
        "uses {case_id} a second time",
    );
    refused(
        &[("query.again", "\"{case_id}\"")],
        "query.again",
        "uses {case_id} a second time",
    );
    refused(
        &[("query.other", "\"{nobody}\"")],
        "query.other",
        "not a declared parameter",
    );
    refused(
        &[(
            "parameters.extra",
            "{ type = \"string\", required = true, max_length = 4, enum = [\"x\"] }",
        )],
        "parameters.extra",
        "is used in neither path_template nor query",
    );
    refused(
        &[(path, "\"/casestatus/x{case_id}\"")],
        path,
        "must be a whole {parameter}",
    );
}

#[test]
fn path_segments_are_unreserved_literals() {
    let path = "path_template";
    for bad in ["/a//{case_id}", "/{case_id}/", "/./{case_id}", "/{case_id}/.."] {
        refused(&[(path, format!("{bad:?}"))], path, "has an empty, `.` or `..` segment");
    }
    for bad in [
        "/a%20b/{case_id}",
        "/a b/{case_id}",
        "/caf\u{e9}/{case_id}",
        "/a?b/{case_id}",
    ] {
        refused(&[(path, format!("{bad:?}"))], path, "of A-Z a-z 0-9 _ - . ~");
    }
    refused(&[(path, "\"casestatus/{case_id}\"")], path, "must start with `/`");
    let ok = with_template(&[(path, "\"/a.b~c_d-e/{case_id}\"")]).unwrap();
    assert_eq!(only_template(&ok).path[0], TemplatePart::Literal("a.b~c_d-e".into()));
}

#[test]
fn query_keys_and_fixed_values_are_bounded() {
    refused(&[("query.a b", "\"x\"")], "query.a b", "the key must be 1 to 64");
    refused(&[("query.a%62", "\"x\"")], "query.a%62", "the key must be 1 to 64");
    let dot = "{ \".\" = \"x\", zeta = \"true\", alpha = \"{kind}\" }";
    refused(&[("query", dot)], "query..", "the key must be 1 to 64");
    let long_key = "k".repeat(65);
    refused(
        &[(format!("query.{long_key}"), "\"x\"".to_owned())],
        &format!("query.{long_key}"),
        "1 to 64",
    );
    let value = format!("{:?}", "v".repeat(257));
    refused(&[("query.zeta", value.as_str())], "query.zeta", "at most 256 bytes");
    refused(
        &[("query.zeta", "\"a\\u0007b\"")],
        "query.zeta",
        "without control characters",
    );
    let ok = with_template(&[("query.zeta", format!("{:?}", "é".repeat(128)))]).unwrap();
    assert_eq!(only_template(&ok).query[1].0, "zeta");
    let many: Vec<(String, String)> = (0..32)
        .map(|i| (format!("query.k{i:02}"), "\"x\"".to_owned()))
        .collect();
    refused(&many, "query", "at most 32 keys");
}

#[test]
fn callers_may_not_send_credentials_or_routing_headers() {
    for (i, name) in [
        "Authorization",
        "X-Api-Key",
        "ApiKey",
        "X-Auth-Token",
        "X-Forwarded-For",
        "Host",
        "Cookie",
        "X-Envoy-Original-Path",
        "bad header",
        &format!("X-{}", "a".repeat(127)),
    ]
    .iter()
    .enumerate()
    {
        let mut list: Vec<String> = (0..i).map(|j| format!("\"X-Ok-{j}\"")).collect();
        list.push(format!("{name:?}"));
        refused(
            &[("allowed_headers", format!("[{}]", list.join(",")))],
            &format!("allowed_headers[{i}]"),
            "may not come from a caller",
        );
    }
    for name in ["Host", "X-Forwarded-For", "User-Agent", "Content-Length"] {
        refused(
            &[(format!("headers.{name}"), "\"literal\"".to_owned())],
            &format!("headers.{name}"),
            "is not a header name a template may send",
        );
    }
}

#[test]
fn a_header_is_fixed_or_allowed_and_at_most_thirty_two() {
    refused(
        &[("allowed_headers", "[\"Accept\", \"AUTHORIZATION\"]")],
        "allowed_headers[1]",
        "may not come from a caller",
    );
    refused(
        &[
            ("headers.X-Tenant", "\"t1\""),
            ("allowed_headers", "[\"Accept\", \"x-tenant\"]"),
        ],
        "allowed_headers[1]",
        "also a fixed header",
    );
    refused(
        &[("allowed_headers", "[\"Accept\", \"ACCEPT\"]")],
        "allowed_headers[1]",
        "named twice",
    );
    let names = |n: usize| {
        let list: Vec<String> = (0..n).map(|i| format!("\"X-H{i:02}\"")).collect();
        format!("[{}]", list.join(","))
    };
    // One fixed header (Authorization) plus the allowed ones.
    let ok = with_template(&[("allowed_headers", names(31))]).expect("32 headers are allowed");
    assert_eq!(only_template(&ok).allowed_headers.len(), 31);
    refused(&[("allowed_headers", names(32))], "headers", "at most 32");
    let longest = format!("[\"X-{}\"]", "a".repeat(126));
    with_template(&[("allowed_headers", longest)]).expect("a name of 128 bytes is allowed");
    refused(
        &[("headers.X-Big", format!("{:?}", "v".repeat(8192)))],
        "headers",
        "over 8192 bytes",
    );
}

#[test]
fn the_longest_url_must_fit_4096_bytes() {
    // Origin 26 bytes + 16 segments of `/` and 256 bytes: 4138.
    refused(&many_parameters(&[256; 16]), "path_template", "over the limit of 4096");
    // 26 + 15 * 257 + 1 + 214 = 4096 exactly.
    let mut lengths = [256; 16];
    lengths[15] = 214;
    let fits = with_template(&many_parameters(&lengths)).expect("4096 bytes fit");
    assert_eq!(only_template(&fits).longest_url(), 4096);
    lengths[15] = 215;
    refused(&many_parameters(&lengths), "path_template", "is 4097 bytes");
}

#[test]
fn labels_are_unique_across_exact_targets_and_templates() {
    let template = || target("case", template_table::<&str, &str>(&[]));
    let pairs = [("CASE_AUTH", AUTH)];
    for targets in [
        vec![exact("case"), template()],
        vec![template(), exact("case")],
        vec![template(), template()],
    ] {
        let error = load_targets(targets, &[], &pairs).unwrap_err();
        assert_eq!(error.key(), "harpoon.targets[1].label", "{error}");
        assert!(error.problem().contains("\"case\" is given twice"), "{error}");
    }
    let bad = load_targets(vec![target("Case", template_table::<&str, &str>(&[]))], &[], &pairs).unwrap_err();
    assert_eq!(bad.key(), "harpoon.targets[0].label", "{bad}");
    let both = load_targets(vec![exact("exact"), template()], &[], &pairs).unwrap();
    assert_eq!(both.harpoon.targets[0].label, "exact");
    assert_eq!(only_template(&both).label, "case");
    let second = load_targets(
        vec![exact("exact"), target("case", template_table(&[("version", "3")]))],
        &[],
        &pairs,
    );
    assert_eq!(
        second.unwrap_err().key(),
        "harpoon.targets[1].template.version",
        "the index is the target's"
    );
}

#[test]
fn unknown_template_fields_are_refused_with_their_key() {
    // serde's untagged `RawTargets` does not hide the key: figment reports the path (with
    // the index as a segment, `targets.0`) and the fields it expected.
    for (edit, key, expected) in [
        (
            "colour",
            "harpoon.targets.0.template.colour",
            "expected one of: version, origin",
        ),
        (
            "parameters.case_id.colour",
            "harpoon.targets.0.template.parameters.case_id.colour",
            "expected one of: type, required",
        ),
    ] {
        let error = with_template(&[(edit, "\"red\"")]).expect_err("an unknown field is refused");
        assert_eq!((error.key(), error.kind()), (key, "unknown_key"), "{error}");
        assert!(error.problem().contains(expected), "{error}");
    }
}
