//! The crate's layering, read from its source: every dependency rule of
//! `docs/ARCHITECTURE.md` ([`RULES`], one per statement of its list), its floors table
//! (read from the document: one row per module of `src/lib.rs` and `src/main.rs`, each import allowed by
//! its row, each floor one above the highest it may import, no row granting what a rule
//! forbids), the one maker of an `Admission`, no module circles, no non-test file over
//! [`MAX_FILE_LINES`], and the crate root's
//! public surface (docs/ARCHITECTURE.md, "Public API": the embedding API, the binary's
//! hidden `operator` module and the fuzz targets' hidden module, every other module
//! private; [`operator`]: what the binary takes, each item used by it and by no test),
//! held by the compiler alone ([`workspace`]: no feature opens the internals, and no
//! target allows the unreachable-`pub` lint). [`workspace`] also holds the crate graph to
//! the one docs/ARCHITECTURE.md draws ("Crates"), edge for edge, and its one rule Cargo
//! does not: no crate of the workspace depends on the gateway.
//!
//! Every `crate::` and `super::` path in the non-test code of `src/` is resolved to the
//! module it names (a file module: `src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). Test
//! code (`tests.rs`, `*_tests.rs`, files under a `tests/` folder, and inline
//! `#[cfg(test)] mod` blocks) may reach anywhere and is not read. A circle is two or more
//! modules that reach each other, where neither contains the other (a parent re-exporting
//! its child, and a child using its parent's items, are one concept).

mod operator;
mod workspace;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every non-test source file under `root`: files under a `tests/` folder, `tests.rs`
/// and `*_tests.rs` are test code.
fn non_test_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "tests" {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Every non-test source file of the library and the binary, by module path (the
/// binary's root, `src/main.rs`, aside).
fn modules() -> BTreeMap<Module, PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for path in non_test_sources(&root) {
        let rel = path.strip_prefix(&root).unwrap().with_extension("");
        if rel == Path::new("main") {
            continue;
        }
        let mut module: Module = rel.iter().map(|s| s.to_string_lossy().to_string()).collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        out.insert(module, path);
    }
    out
}

/// The non-test source files of the workspace's other crates (`crates/*/src`).
fn workspace_crate_files() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let out: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .flat_map(|e| non_test_sources(&e.unwrap().path().join("src")))
        .collect();
    assert!(!out.is_empty(), "the walk found the crates' source files");
    out
}

/// The source without comments, string literals and inline test modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            if let Some(next) = lines.peek() {
                if next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{') {
                    let mut depth = 0i32;
                    for inner in lines.by_ref() {
                        depth += inner.matches('{').count() as i32 - inner.matches('}').count() as i32;
                        if depth <= 0 {
                            break;
                        }
                    }
                }
            }
            continue;
        }
        let mut in_string = false;
        let mut prev = ' ';
        let mut kept = String::new();
        for (i, c) in line.char_indices() {
            if !in_string && c == '/' && line[i..].starts_with("//") {
                break;
            }
            if c == '"' && prev != '\\' && prev != '\'' {
                in_string = !in_string;
            } else if !in_string {
                kept.push(c);
            }
            prev = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// The paths a file names that start at `crate::` or `super::`, brace groups expanded,
/// as module paths relative to the crate root.
fn references(module: &Module, code: &str) -> Vec<Module> {
    // `super` is the parent module, for a `mod.rs` as for any other file (its module
    // path is already the folder's).
    let base: Module = module[..module.len().saturating_sub(1)].to_vec();
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let boundary = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_' || bytes[i - 1] == ':');
        let start = if boundary && rest.starts_with("crate::") {
            Some((Vec::new(), i + 7))
        } else if boundary && rest.starts_with("super::") {
            let mut at = i + 7;
            let mut up = base.clone();
            while bytes[at..].iter().collect::<String>().starts_with("super::") {
                up.pop();
                at += 7;
            }
            Some((up, at))
        } else {
            None
        };
        if let Some((prefix, at)) = start {
            let (paths, end) = parse_tree(&bytes, at);
            for p in paths {
                let mut full = prefix.clone();
                full.extend(p);
                out.push(full);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Parses `a::b::{c, d::e}` from `at`: every path it names, and where it ends.
fn parse_tree(bytes: &[char], mut at: usize) -> (Vec<Module>, usize) {
    let mut segments = Vec::new();
    loop {
        while at < bytes.len() && bytes[at].is_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == '{' {
            at += 1;
            let mut paths = Vec::new();
            loop {
                let (inner, end) = parse_tree(bytes, at);
                for p in inner {
                    let mut full = segments.clone();
                    full.extend(p);
                    paths.push(full);
                }
                at = end;
                while at < bytes.len() && (bytes[at].is_whitespace() || bytes[at] == ',') {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == '}' {
                    return (paths, at + 1);
                }
            }
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_alphanumeric() || bytes[at] == '_') {
            at += 1;
        }
        if start == at {
            return (vec![segments], at);
        }
        segments.push(bytes[start..at].iter().collect());
        if bytes[at..].iter().take(2).collect::<String>() == "::" {
            at += 2;
        } else {
            return (vec![segments], at);
        }
    }
}

/// Which module of the crate each file module reaches (its longest known prefix).
fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules();
    let known: BTreeSet<Module> = modules.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, path) in &modules {
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        let mut reached = BTreeSet::new();
        for target in references(module, &code) {
            let Some(hit) = (1..=target.len())
                .rev()
                .map(|n| target[..n].to_vec())
                .find(|p| known.contains(p))
            else {
                continue;
            };
            if hit != *module {
                reached.insert(hit);
            }
        }
        edges.insert(module.clone(), reached);
    }
    edges
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

/// The top-level modules each top-level module reaches.
fn top_level(edges: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        let Some(f) = from.first() else { continue };
        for to in tos {
            if let Some(t) = to.first().filter(|t| *t != f) {
                out.entry(f.clone()).or_default().insert(t.clone());
            }
        }
    }
    out
}

/// A dependency rule of `docs/ARCHITECTURE.md` ("Dependency rules"), over top-level
/// modules.
enum Rule {
    /// The module imports only these.
    Only(&'static str, &'static [&'static str]),
    /// The first module never imports the second.
    Never(&'static str, &'static str),
    /// No module but these imports the module.
    ImportedOnlyBy(&'static str, &'static [&'static str]),
}

/// Every rule the architecture states, as its "Dependency rules" list says it.
const RULES: &[Rule] = &[
    // The ground floor, and the three other modules that import nothing. The wire
    // protocol, the egress client, the etcd client and the simulator, crates of their
    // own, import nothing of the gateway by the crate graph.
    Rule::Only("config", &[]),
    Rule::Only("telemetry", &[]),
    Rule::Only("health", &[]),
    Rule::Only("descriptors", &[]),
    Rule::Only("stderr", &[]),
    Rule::Only("supervisor", &["telemetry"]),
    Rule::Never("downstream", "control"),
    Rule::Never("control", "downstream"),
    Rule::Never("control", "strict"),
    Rule::Never("control", "dispatch"),
    Rule::Never("strict", "downstream"),
    Rule::Never("strict", "control"),
    Rule::Never("strict", "dispatch"),
    Rule::Never("ops", "dispatch"),
    Rule::Never("ops", "coord"),
    Rule::Only("bundle", &["config", "doctor", "strict", "receipts"]),
    Rule::Never("bundle", "ops"),
    // Coordination across replicas talks to etcd only: never to an MCP server or the
    // control plane, and it decides nothing of a command's lifecycle.
    Rule::Only("coord", &["config", "health", "strict", "telemetry"]),
    Rule::ImportedOnlyBy("coord", &["app", "cli", "doctor", "operator"]),
    Rule::Never("dispatch", "coord"),
    Rule::Never("strict", "coord"),
];

/// What `reaches` (module -> the modules it imports, or may import) breaks of [`RULES`];
/// "reaches" is either.
fn broken_rules(reaches: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let of = |m: &str| reaches.get(m).cloned().unwrap_or_default();
    let mut broken = Vec::new();
    for rule in RULES {
        match rule {
            Rule::Only(from, allowed) => {
                for t in of(from).iter().filter(|t| !allowed.contains(&t.as_str())) {
                    broken.push(format!("{from} may import only {allowed:?}, but reaches {t}"));
                }
            }
            Rule::Never(from, forbidden) => {
                if of(from).contains(*forbidden) {
                    broken.push(format!("{from} must not import {forbidden}, but reaches it"));
                }
            }
            Rule::ImportedOnlyBy(to, importers) => {
                for (from, tos) in reaches {
                    if tos.contains(*to) && !importers.contains(&from.as_str()) {
                        broken.push(format!("only {importers:?} may import {to}, but {from} reaches it"));
                    }
                }
            }
        }
    }
    broken
}

/// The floors table of `docs/ARCHITECTURE.md`: each module's floor and what it may import.
fn documented_floors() -> BTreeMap<String, (u32, BTreeSet<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let names = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_owned).collect() };
    let mut out = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| floor | module | may import |`: four separators, a number first.
        let [_, floor, module, may, _] = cells[..] else {
            continue;
        };
        let Ok(floor) = floor.parse::<u32>() else { continue };
        let [module] = &names(module)[..] else {
            panic!("a floors row names one module: {line}")
        };
        let may: BTreeSet<String> = names(may).into_iter().collect();
        assert!(
            may.is_empty() == (cells[3] == "nothing"),
            "a row says `nothing` or names modules: {line}"
        );
        assert!(
            out.insert(module.clone(), (floor, may)).is_none(),
            "{module} has two rows"
        );
    }
    assert!(!out.is_empty(), "docs/ARCHITECTURE.md has its floors table");
    out
}

/// The modules a crate root of the root package declares (`src/lib.rs`, the library;
/// `src/main.rs`, the binary).
fn modules_of(root: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(root)).unwrap();
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// The modules of the library and of the binary: one floors row each.
fn declared_modules() -> BTreeSet<String> {
    let library = modules_of("src/lib.rs");
    let binary = modules_of("src/main.rs");
    assert!(
        library.is_disjoint(&binary),
        "a module is the library's or the binary's, not both"
    );
    library.union(&binary).cloned().collect()
}

/// The longest a non-test source file may be: a room a newcomer can hold in their head.
const MAX_FILE_LINES: usize = 700;

#[test]
fn no_non_test_source_file_is_longer_than_the_limit() {
    let mut long: Vec<String> = modules()
        .into_values()
        .chain(workspace_crate_files())
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines: split them into rooms by concern (docs/ARCHITECTURE.md): {long:?}"
    );
    assert!(modules().len() > 100, "the walk found the source files");
}

#[test]
fn the_dependency_rules_of_the_design_hold() {
    let broken = broken_rules(&top_level(&graph()));
    assert!(broken.is_empty(), "dependency rules broken:\n{}", broken.join("\n"));
}

#[test]
fn the_floors_table_grants_nothing_a_dependency_rule_forbids() {
    let granted = documented_floors().into_iter().map(|(m, (_, may))| (m, may)).collect();
    let broken = broken_rules(&granted);
    assert!(
        broken.is_empty(),
        "the floors table contradicts the rules:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_module_has_a_floor_and_imports_only_what_its_row_allows() {
    let floors = documented_floors();
    let declared = declared_modules();
    let rows: BTreeSet<String> = floors.keys().cloned().collect();
    assert_eq!(
        rows, declared,
        "docs/ARCHITECTURE.md has one floors row per module of src/lib.rs and src/main.rs"
    );
    let mut broken = Vec::new();
    for (module, reached) in top_level(&graph()) {
        let may = floors.get(&module).map(|(_, may)| may.clone()).unwrap_or_default();
        for t in reached.difference(&may) {
            broken.push(format!("{module} imports {t}, which its floors row does not allow"));
        }
    }
    for (module, (floor, may)) in &floors {
        let mut expected = 0;
        for t in may {
            match floors.get(t) {
                Some((below, _)) => expected = expected.max(below + 1),
                None => broken.push(format!("{module} may import {t}, which has no row")),
            }
        }
        if *floor != expected {
            broken.push(format!(
                "{module} is on floor {floor}, but what it may import puts it on floor {expected}"
            ));
        }
    }
    assert!(broken.is_empty(), "floors broken:\n{}", broken.join("\n"));
}

#[test]
fn only_the_fence_makes_an_admission_and_it_cannot_be_cloned() {
    let mut built_in = Vec::new();
    for (module, path) in modules() {
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        let squeezed: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
        // A struct expression (`Admission {`): not the declaration, an `impl` header or a
        // return type before a body.
        let mut at = 0;
        while let Some(i) = squeezed[at..].find("Admission {") {
            let before = &squeezed[..at + i];
            let ident_start = !before.ends_with(|c: char| c.is_alphanumeric() || c == '_');
            let named_only = ["struct ", "impl ", "for ", "-> "].iter().any(|k| before.ends_with(k));
            if ident_start && !named_only {
                built_in.push(name(&module));
            }
            at += i + 1;
        }
        if module == ["strict", "fence"] {
            let declared = squeezed
                .find("struct Admission<")
                .expect("strict::fence declares Admission");
            let attributes = squeezed[..declared].rsplit(';').next().unwrap_or_default();
            let attributes = attributes.rsplit('}').next().unwrap_or_default();
            assert!(!attributes.contains("Clone"), "Admission derives Clone: {attributes}");
            assert!(!squeezed.contains("Clone for Admission"), "Admission implements Clone");
        }
    }
    assert_eq!(built_in, ["strict::fence"], "where an Admission is built");
}

#[test]
fn no_two_modules_reach_each_other() {
    let edges = graph();
    // Strongly connected components (Tarjan), over edges between modules where neither
    // contains the other.
    let nodes: Vec<Module> = edges.keys().cloned().collect();
    let index_of: BTreeMap<&Module, usize> = nodes.iter().enumerate().map(|(i, m)| (m, i)).collect();
    let contains = |a: &Module, b: &Module| b.starts_with(a) || a.starts_with(b);
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|m| {
            edges[m]
                .iter()
                .filter(|t| !contains(m, t))
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let circles = strongly_connected(&adjacency)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|&i| name(&nodes[i])).collect::<Vec<_>>().join(" <-> "))
        .collect::<Vec<_>>();
    assert!(circles.is_empty(), "module circles:\n{}", circles.join("\n"));
}

/// Tarjan's algorithm, iterative enough for a crate's module count.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn the_reader_resolves_crate_super_and_brace_paths() {
    let code = code_of(
        "use crate::{control::{A, b::C}, strict};\nuse super::super::x::Y;\n// crate::comment::Ignored\nlet s = \"crate::string::Ignored\";\nfn f() { crate::ops::serve(); }\n#[cfg(test)]\nmod tests {\n    use crate::test_only::Z;\n}\n",
    );
    let module: Module = vec!["a".into(), "b".into(), "c".into()];
    let found: BTreeSet<String> = references(&module, &code).iter().map(|m| m.join("::")).collect();
    let expected: BTreeSet<String> = ["control::A", "control::b::C", "strict", "a::x::Y", "ops::serve"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(found, expected);
}

/// Every `pub` line of `src/lib.rs`, as the "Public API" paragraph of
/// `docs/ARCHITECTURE.md` lists it; each line is `(attributes above it, the line)`.
const PUBLIC_SURFACE: &[(&[&str], &str)] = &[
    (&[], "pub use app::{Gateway, GatewayError, RunOutcome, StopHandle};"),
    (&[], "pub use config::{Config, ConfigError, Overrides};"),
    (&[], "pub use strict::{Fatal, FatalCategory};"),
    (&["#[doc(hidden)]"], "pub mod operator;"),
    (&["#[cfg(any(test, fuzzing))]", "#[doc(hidden)]"], "pub mod fuzzing;"),
];

#[test]
fn the_crate_root_exposes_the_embedding_api_and_only_the_hidden_surfaces_beside_it() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let lines: Vec<&str> = lib.lines().map(str::trim).collect();
    assert!(
        lines.contains(&"#![deny(unreachable_pub)]"),
        "src/lib.rs denies unreachable_pub"
    );
    let mut public = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("//") {
            continue;
        }
        if line.starts_with("pub") && !line.starts_with("pub(crate)") {
            let attributes: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .filter(|l| l.starts_with("#["))
                .copied()
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            public.push((attributes, *line));
        } else if line.starts_with("mod ") {
            continue;
        } else {
            assert!(!line.contains(" mod "), "a module of src/lib.rs is private: {line}");
        }
    }
    public.sort();
    let mut expected: Vec<(Vec<&str>, &str)> = PUBLIC_SURFACE.iter().map(|(a, l)| (a.to_vec(), *l)).collect();
    expected.sort();
    assert_eq!(public, expected, "the public lines of src/lib.rs");
}
