//! The documentation held against the code: the configuration reference
//! (`docs/configuration.md`) lists exactly the keys the binary accepts, each with its
//! `TUNNELGATE_` variable and a default that `tunnelgate check` confirms; every relative
//! link of `README.md` and `docs/*.md` reaches a file, and a heading where it names one;
//! the README stays a front page.
//!
//! The accepted keys are asked of the real binary, not read from the source: `tunnelgate
//! check` on a configuration with an unknown key answers with every key of that table
//! ("unknown key ... (expected one of: ...)", serde's own field list behind
//! `deny_unknown_fields`), and a table set where a value belongs tells a nested table, a
//! map of tables (`mcp.channels.NAME`) and a plain value apart. So a renamed, added or
//! removed key is seen as the configuration loader sees it, whatever the source looks like
//! (a parser of `src/config/raw.rs` would miss a `rename`, an `alias` or a `flatten`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{repo_root, CliRun, Gateway};

const T: Duration = Duration::from_secs(30);
/// A key no table has, and far (more than two edits) from every real one, so that the
/// loader lists the table's keys instead of suggesting one.
const PROBE: &str = "zzzzzzzzzzzz";
/// How the reference writes a channel's name in a key.
const NAME: &str = "NAME";
const REFERENCE: &str = "docs/configuration.md";

// ---------------------------------------------------------------------------------------
// The configuration reference
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_config_key_the_binary_accepts_is_in_the_reference_and_every_key_there_is_accepted() {
    let accepted = accepted_keys().await;
    let documented = documented_keys();
    let missing: Vec<&String> = accepted.iter().filter(|k| !documented.contains_key(*k)).collect();
    let gone: Vec<&String> = documented.keys().filter(|k| !accepted.contains(*k)).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "{REFERENCE} is out of date.\naccepted by `tunnelgate check` but not in the reference: {missing:?}\n\
         in the reference but no longer accepted: {gone:?}"
    );
    let mut problems = Vec::new();
    for (key, row) in &documented {
        let var = prefixed_env_var(key);
        if !row.environment.contains(&var) {
            problems.push(format!("{key}: the environment column does not name {var}"));
        }
        if row.default.trim().is_empty() {
            problems.push(format!("{key}: no default (write `required`, `none` or `unset`)"));
        }
    }
    assert!(problems.is_empty(), "{REFERENCE}:\n{}", problems.join("\n"));
}

#[tokio::test]
async fn every_default_written_as_a_value_in_the_reference_is_what_check_prints() {
    const BASE: &str = r#"
[control_plane]
tunnel_id = "tunnel_docs"
[mcp.channels.web]
url = "http://127.0.0.1:9/mcp"
[mcp.channels.pipe]
command = ["node", "server.js"]
"#;
    let default_mode = effective(BASE).await;
    // The etcd table is printed only with coordination on, which needs strict mode.
    let with_etcd = effective(&format!(
        "{BASE}\n[strict]\nenabled = true\n[coordination]\nbackend = \"etcd\"\n"
    ))
    .await;
    let mut compared = 0;
    let mut problems = Vec::new();
    for (key, row) in documented_keys() {
        let Some(want) = literal(&row.default) else { continue };
        let printed = if key.starts_with("coordination.etcd.") {
            &with_etcd
        } else {
            &default_mode
        };
        let Some(got) = lookup(printed, &key.split('.').collect::<Vec<_>>()) else {
            continue;
        };
        compared += 1;
        if !same_value(&want, got) {
            problems.push(format!(
                "{key}: the reference says {want}, `tunnelgate check` prints {got}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{REFERENCE}: stale defaults:\n{}",
        problems.join("\n")
    );
    // Most defaults are plain values: a parser that found none would prove nothing.
    assert!(compared >= 30, "only {compared} defaults were compared");
}

/// The effective configuration `tunnelgate check` prints is a view kept by hand
/// (`src/config/masked.rs`: it rebuilds the key shape from the typed configuration, which
/// is shaped for the gateway, and masks every secret). This holds it complete: every key
/// the binary accepts is printed, by one of two configurations (the defaults, and one
/// setting every table and optional value).
#[tokio::test]
async fn check_prints_every_key_the_binary_accepts() {
    const BASE: &str = "[control_plane]\ntunnel_id = \"tunnel_docs\"\n[mcp.channels.web]\nurl = \"http://127.0.0.1:9/mcp\"\n[mcp.channels.pipe]\ncommand = [\"node\", \"server.js\"]\n";
    // Every table and optional value set (paths are printed, not read, by `check`).
    const SET: &str = r#"
[control_plane]
tunnel_id = "tunnel_docs"
organization_id = "org"
initial_poll_timeout = "2s"
poll_channels = ["web"]
[control_plane.headers]
X-Cp = "literal"
[control_plane.tls]
ca_file = "/etc/tunnelgate/ca.pem"
client_cert = "/etc/tunnelgate/client.pem"
client_key = "/etc/tunnelgate/client.key"
ca_only = true
[mcp.tls]
ca_file = "/etc/tunnelgate/ca.pem"
client_cert = "/etc/tunnelgate/client.pem"
client_key = "/etc/tunnelgate/client.key"
ca_only = true
[mcp.channels.web]
url = "https://127.0.0.1:9/mcp"
[mcp.channels.web.headers]
X-Web = "literal"
[mcp.channels.web.tls]
ca_file = "/etc/tunnelgate/ca.pem"
client_cert = "/etc/tunnelgate/client.pem"
client_key = "/etc/tunnelgate/client.key"
ca_only = true
[mcp.channels.sock]
url = "http://localhost/mcp"
socket = "/run/mcp.sock"
[mcp.channels.pipe]
command = ["node", "server.js"]
env = { A = "1" }
[harpoon.tls]
ca_file = "/etc/tunnelgate/ca.pem"
client_cert = "/etc/tunnelgate/client.pem"
client_key = "/etc/tunnelgate/client.key"
ca_only = true
[ops]
url_file = "/tmp/tunnelgate-docs.url"
[runtime]
pid_file = "/tmp/tunnelgate-docs.pid"
[strict]
enabled = true
[coordination]
backend = "etcd"
[coordination.etcd]
username = "literal-user"
password = "literal-password"
[coordination.etcd.tls]
ca_file = "/etc/tunnelgate/ca.pem"
client_cert = "/etc/tunnelgate/client.pem"
client_key = "/etc/tunnelgate/client.key"
ca_only = true
"#;
    let configurations = [BASE, SET];
    let mut printed = BTreeSet::new();
    for toml in configurations {
        key_paths(&effective(toml).await, &mut Vec::new(), &mut printed);
    }
    let accepted = accepted_keys().await;
    let missing: Vec<&String> = accepted.iter().filter(|k| !printed.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "accepted by the loader but never printed by `tunnelgate check` (src/config/masked.rs): {missing:?}"
    );
}

/// Every key path of `table`, a channel's name written `NAME`.
fn key_paths(table: &toml::Table, path: &mut Vec<String>, into: &mut BTreeSet<String>) {
    for (key, value) in table {
        let name = if path.len() == 2 && path[0] == "mcp" && path[1] == "channels" {
            NAME.to_owned()
        } else {
            key.clone()
        };
        path.push(name);
        into.insert(path.join("."));
        if let toml::Value::Table(inner) = value {
            key_paths(inner, path, into);
        }
        path.pop();
    }
}

#[test]
fn every_official_client_variable_the_loader_reads_is_in_the_reference() {
    let reference = read(REFERENCE);
    let mut missing = BTreeSet::new();
    for file in ["src/config/layers.rs", "src/config/headers.rs", "src/config/proxy.rs"] {
        let text = read(file);
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for literal in code.split('"').skip(1).step_by(2) {
            if is_env_var_name(literal) && !reference.contains(&format!("`{literal}`")) {
                missing.insert(format!("{literal} (read in {file})"));
            }
        }
    }
    assert!(missing.is_empty(), "{REFERENCE} does not name: {missing:?}");
}

/// One row of the reference's key tables.
struct Row {
    default: String,
    environment: String,
}

/// The key tables under `## Every key`: `| key | default | environment | meaning |`.
fn documented_keys() -> BTreeMap<String, Row> {
    let text = read(REFERENCE);
    let mut keys = BTreeMap::new();
    let mut in_keys = false;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            in_keys = heading == "Every key";
            continue;
        }
        if !in_keys || !line.starts_with("| `") {
            continue;
        }
        let cells = table_cells(line);
        assert_eq!(cells.len(), 4, "{REFERENCE}: a key row has four cells: {line}");
        let key = cells[0].trim_matches('`').to_owned();
        assert!(
            !key.contains('`') && !key.contains(' '),
            "{REFERENCE}: one key per row, in backticks: {line}"
        );
        let row = Row {
            default: cells[1].clone(),
            environment: cells[2].clone(),
        };
        assert!(keys.insert(key.clone(), row).is_none(), "{REFERENCE}: {key} twice");
    }
    assert!(!keys.is_empty(), "{REFERENCE}: no key rows under `## Every key`");
    keys
}

/// The cells of a Markdown table row; a `|` inside backticks stays in its cell.
fn table_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => in_code = !in_code,
            '|' if !in_code => {
                cells.push(String::new());
                continue;
            }
            _ => {}
        }
        cells.last_mut().expect("one cell at least").push(c);
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// `TUNNELGATE_` and the key's path in upper case, `__` between levels.
fn prefixed_env_var(key: &str) -> String {
    format!("TUNNELGATE_{}", key.to_ascii_uppercase().replace('.', "__"))
}

/// `CA_BUNDLE`, `MCP_EXTRA_HEADERS`: upper-case words joined by `_`.
fn is_env_var_name(s: &str) -> bool {
    let words: Vec<&str> = s.split('_').collect();
    words.len() > 1
        && words.iter().all(|w| {
            !w.is_empty()
                && w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                && w.starts_with(|c: char| c.is_ascii_uppercase())
        })
}

/// Every key `tunnelgate check` accepts, a channel's name written `NAME`.
async fn accepted_keys() -> BTreeSet<String> {
    let root = match probe(&[], toml::Value::Integer(1)).await {
        Probe::Table(fields) => fields,
        other => panic!("the top level of the configuration is not a table of known keys: {other:?}"),
    };
    let mut keys = BTreeSet::new();
    let mut tables: Vec<(Vec<String>, Vec<String>)> = vec![(Vec::new(), root)];
    while let Some((path, fields)) = tables.pop() {
        for field in fields {
            let mut key = path.clone();
            key.push(field);
            let nested = toml::Value::Table(toml::Table::from_iter([(
                PROBE.to_owned(),
                toml::Value::Table(toml::Table::from_iter([(PROBE.to_owned(), toml::Value::Integer(1))])),
            )]));
            match probe(&key, nested).await {
                Probe::Table(inner) => tables.push((key, inner)),
                Probe::MapOfTables(inner) => {
                    key.push(PROBE.to_owned());
                    tables.push((key, inner));
                }
                Probe::Value => {
                    let shown: Vec<&str> = key.iter().map(|k| if k == PROBE { NAME } else { k.as_str() }).collect();
                    keys.insert(shown.join("."));
                }
            }
        }
    }
    keys
}

/// What a key holds, as the loader answers a probe.
#[derive(Debug)]
enum Probe {
    /// A table of these keys.
    Table(Vec<String>),
    /// A table of named tables (`mcp.channels`), each of these keys.
    MapOfTables(Vec<String>),
    /// Anything else: a value, a list, or a table of values (`headers`, `env`).
    Value,
}

/// `tunnelgate check` with `value` at `path` of a valid configuration (at the top level,
/// `path` empty, a `PROBE` key set to `value`).
async fn probe(path: &[String], value: toml::Value) -> Probe {
    let mut doc: toml::Table = toml::from_str(
        "[control_plane]\ntunnel_id = \"tunnel_docs\"\n[mcp.channels.main]\nurl = \"http://127.0.0.1:9/mcp\"\n",
    )
    .unwrap();
    let at = if path.is_empty() {
        vec![PROBE.to_owned()]
    } else {
        path.to_vec()
    };
    set(&mut doc, &at, value);
    let run = Gateway::cli(&["check"], Some(&toml::to_string(&doc).unwrap()), &[], T).await;
    let Some((key, problem)) = config_error(&run) else {
        return Probe::Value;
    };
    let Some(fields) = listed_keys(&problem) else {
        return Probe::Value;
    };
    let under = |depth: usize| {
        let mut want = path.to_vec();
        want.extend(std::iter::repeat_n(PROBE.to_owned(), depth));
        key == want.join(".")
    };
    if under(1) {
        Probe::Table(fields)
    } else if under(2) {
        Probe::MapOfTables(fields)
    } else {
        panic!("probing {path:?}: an unknown key elsewhere: {key}: {problem}")
    }
}

fn set(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let (first, rest) = path.split_first().expect("a non-empty path");
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return;
    }
    let entry = table
        .entry(first.clone())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    set(entry.as_table_mut().expect("made a table"), rest, value);
}

/// `tunnelgate: invalid configuration: KEY: PROBLEM` as (key, problem).
fn config_error(run: &CliRun) -> Option<(String, String)> {
    let line = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("tunnelgate: invalid configuration: "))?;
    let (key, problem) = line.split_once(": ")?;
    Some((key.to_owned(), problem.to_owned()))
}

/// The keys of "unknown key `...` (expected one of: a, b, c)".
fn listed_keys(problem: &str) -> Option<Vec<String>> {
    let list = problem
        .strip_prefix("unknown key `")?
        .split_once("(expected one of: ")?
        .1
        .strip_suffix(')')?;
    Some(list.split(", ").map(str::to_owned).collect())
}

/// What `tunnelgate check` prints for `toml`, parsed.
async fn effective(toml: &str) -> toml::Table {
    let run = Gateway::cli(&["check"], Some(toml), &[("CONTROL_PLANE_API_KEY", "docs-test-key")], T).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    toml::from_str(&run.stdout).unwrap_or_else(|e| panic!("check's output is not TOML: {e}\n{}", run.stdout))
}

/// A default cell that is one TOML value in backticks (`"30s"`, `20`, `false`), else
/// `None` (prose, or a reference to another key).
fn literal(cell: &str) -> Option<toml::Value> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    if inner.contains('`') {
        return None;
    }
    let mut parsed: toml::Table = toml::from_str(&format!("v = {inner}")).ok()?;
    parsed.remove("v")
}

/// The value at `path` of check's output; `NAME` matches any channel that has the rest.
fn lookup<'a>(table: &'a toml::Table, path: &[&str]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let candidates: Vec<&toml::Value> = if *first == NAME {
        table.values().collect()
    } else {
        table.get(*first).into_iter().collect()
    };
    candidates.into_iter().find_map(|value| match (rest.is_empty(), value) {
        (true, v) => Some(v),
        (false, toml::Value::Table(inner)) => lookup(inner, rest),
        _ => None,
    })
}

/// Equal values, durations by length (`"300s"` is printed `"5m"`), and a secret
/// reference as `check` masks it (`"env:NAME (set, 13 bytes)"`).
fn same_value(documented: &toml::Value, printed: &toml::Value) -> bool {
    if let (Some(d), Some(p)) = (documented.as_str(), printed.as_str()) {
        if let (Ok(d), Ok(p)) = (humantime::parse_duration(d), humantime::parse_duration(p)) {
            return d == p;
        }
        return d == p || p.starts_with(&format!("{d} ("));
    }
    documented == printed
}

// ---------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves_to_a_file_and_its_heading() {
    let mut files = vec![repo_root().join("README.md")];
    files.extend(markdown_in(&repo_root().join("docs")));
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target
                .split_once('#')
                .map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let shown = file.strip_prefix(repo_root()).unwrap().display();
            if !resolved.exists() {
                problems.push(format!("{shown}: ({target}): no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_some_and(|e| e == "md") {
                let slugs = heading_slugs(&std::fs::read_to_string(&resolved).unwrap());
                if !slugs.contains(anchor) {
                    problems.push(format!("{shown}: ({target}): no heading with that anchor"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
    assert!(checked > 100, "only {checked} links found: is the link parser blind?");
}

#[test]
fn the_readme_is_a_front_page_of_at_most_300_lines_that_opens_with_the_demo_and_the_tests() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines: move the detail into docs/");
    let commands: Vec<&str> = readme
        .split("```sh\n")
        .skip(1)
        .flat_map(|block| block.split("```").next().unwrap_or_default().lines())
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .take(2)
        .collect();
    assert!(
        commands.len() == 2
            && commands[0].starts_with("cargo run --release -- demo")
            && commands[1].starts_with("scripts/test"),
        "the README's first two commands must be the demo and scripts/test: {commands:?}"
    );
    for map_entry in markdown_in(&repo_root().join("docs")) {
        let name = map_entry.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            readme.contains(&format!("(docs/{name})")),
            "the README's map of docs/ does not link docs/{name}"
        );
    }
}

/// The `*.md` files directly in `dir`, sorted.
fn markdown_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// The targets of inline links and images, `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let prose = without_code(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].trim();
        if !target.is_empty() && !target.contains(char::is_whitespace) {
            out.push(target.to_owned());
        }
        rest = &rest[end..];
    }
    out
}

/// `text` with fenced code blocks and inline code spans blanked.
fn without_code(text: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        if !fenced {
            prose.push_str(&without_code_spans(line));
        }
        prose.push('\n');
    }
    prose
}

/// A line without its code spans: a run of N backticks up to the next run of exactly N.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let close = loop {
            if j >= chars.len() {
                break None;
            }
            if chars[j] == '`' {
                let m = run_at(j);
                if m == n {
                    break Some(j + m);
                }
                j += m;
            } else {
                j += 1;
            }
        };
        match close {
            Some(after) => i = after,
            None => {
                out.extend(&chars[i..i + n]);
                i += n;
            }
        }
    }
    out
}

/// The anchors GitHub gives the headings of a Markdown file: lower case, punctuation
/// dropped (letters, digits, `_`, `-` and spaces kept), spaces to `-`; a repeated one gets
/// `-1`, `-2`, ...
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut slugs = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        slugs.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    slugs
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}
