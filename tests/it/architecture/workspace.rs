//! The workspace as a whole, read from its manifests and files: visibility held by the
//! compiler (no feature opens the gateway's internals, no target allows the
//! unreachable-`pub` lint), and the crates' graph (docs/ARCHITECTURE.md, "Crates"): the
//! manifests' edges are the table's, no crate under `crates/` depends on the gateway, and
//! the tests' peers crate is a dev-dependency only.

use std::path::{Path, PathBuf};

/// The `.rs` files of the workspace's targets: `src/`, `crates/`, `tests/`, `examples/`
/// and the fuzz targets.
pub(super) fn every_rust_file() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack: Vec<PathBuf> = ["src", "crates", "tests", "examples", "fuzz/fuzz_targets"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    let mut out = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Whether `text` has a lint attribute `allow(...)` (plain or inside a `cfg_attr`) that
/// names `lint`.
fn allows(text: &str, lint: &str) -> bool {
    text.match_indices("allow").any(|(at, word)| {
        let rest = text[at + word.len()..].trim_start();
        let boundary = !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        boundary
            && rest.starts_with('(')
            && rest[..rest.find(')').unwrap_or(rest.len())]
                .split([',', '(', ' ', '\n'])
                .any(|name| name.trim() == lint)
    })
}

#[test]
fn visibility_is_held_by_the_compiler_with_no_internals_feature_and_no_unreachable_pub_waiver() {
    // Spelled in two halves, so that this file does not name it where the scan looks.
    let lint = ["unreachable", "_pub"].concat();
    assert!(allows("#![allow(dead_code, X)]", "X") && allows("#[cfg_attr(a, allow(Y))]", "Y"));
    assert!(!allows("#![deny(X)]", "X") && !allows("allowed(X)", "X"));
    let files = every_rust_file();
    assert!(files.len() > 100, "the walk found the workspace's sources");
    let waived: Vec<String> = files
        .iter()
        .filter(|path| allows(&std::fs::read_to_string(path).unwrap(), &lint))
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        waived.is_empty(),
        "these allow {lint}: make the items pub(crate) instead: {waived:?}"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let features = manifest["features"].as_table().unwrap();
    assert!(
        features.keys().all(|f| f == "default" || f == "mimalloc"),
        "Cargo.toml's features are the allocator's only: {features:?}"
    );
    let dev = manifest["dev-dependencies"].as_table().unwrap();
    assert!(!dev.contains_key("tunnelgate"), "no dev-dependency on the crate itself");
    let level = &manifest["workspace"]["lints"]["rust"][&lint];
    assert!(
        level.as_str().is_some_and(|l| l != "allow"),
        "the workspace does not allow {lint}: {level}"
    );
    let fuzz: toml::Table = std::fs::read_to_string(root.join("fuzz/Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let gateway = &fuzz["dependencies"]["tunnelgate"];
    assert!(
        gateway.get("features").is_none(),
        "fuzz/ builds the gateway with `--cfg fuzzing`, never a feature: {gateway}"
    );
}

/// A manifest, parsed.
fn manifest(path: &Path) -> toml::Table {
    std::fs::read_to_string(path).unwrap().parse().unwrap()
}

/// Cargo refuses a cycle through normal dependencies, so the protocol and simulator crates
/// cannot depend on the gateway that depends on them; but it allows a dev-dependency that
/// depends back on the package (the gateway would then be built twice, as two crates whose
/// types differ). `tunnelgate-test-peers` is such a dev-dependency: this test holds it.
#[test]
fn no_crate_of_the_workspace_depends_on_the_gateway_and_the_test_peers_are_a_dev_dependency_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("Cargo.toml"))
        .collect();
    assert!(crates.len() >= 3, "the walk found the crates: {crates:?}");
    for path in &crates {
        let krate = manifest(path);
        let tables = ["dependencies", "dev-dependencies", "build-dependencies"];
        let on_gateway = tables
            .iter()
            .filter_map(|t| krate.get(*t)?.as_table())
            .any(|deps| deps.contains_key("tunnelgate"));
        assert!(!on_gateway, "{} depends on the gateway", path.display());
    }
    let gateway = manifest(&root.join("Cargo.toml"));
    let names_peers = |table: &str| gateway[table].as_table().unwrap().contains_key("tunnelgate-test-peers");
    assert!(
        names_peers("dev-dependencies") && !names_peers("dependencies"),
        "tunnelgate-test-peers is a dev-dependency of the gateway, and only that"
    );
}

/// A crate's workspace dependencies: (normal, dev), each by package name.
type CrateEdges = (Vec<String>, Vec<String>);

/// The workspace crates a manifest depends on (those given by `path`), per table.
fn workspace_edges(krate: &toml::Table) -> CrateEdges {
    let of = |table: &str| -> Vec<String> {
        let mut names: Vec<String> = krate
            .get(table)
            .and_then(|t| t.as_table())
            .map(|deps| {
                deps.iter()
                    .filter(|(_, spec)| spec.get("path").is_some())
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    (of("dependencies"), of("dev-dependencies"))
}

/// The crates table of docs/ARCHITECTURE.md ("Crates"): each crate's path and the
/// workspace crates it may depend on, normal and dev.
fn documented_crates() -> std::collections::BTreeMap<String, (String, CrateEdges)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let names = |cell: &str| -> Vec<String> {
        let mut out: Vec<String> = cell.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        out.sort();
        out
    };
    let mut out = std::collections::BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| crate | path | depends on | dev-depends on |`
        let [_, krate, path, deps, dev, _] = cells[..] else {
            continue;
        };
        let [krate] = &names(krate)[..] else { continue };
        let [path] = &names(path)[..] else { continue };
        if !krate.starts_with("tunnelgate") {
            continue;
        }
        let edges = (names(deps), names(dev));
        assert!(
            out.insert(krate.clone(), (path.clone(), edges)).is_none(),
            "{krate} has two rows"
        );
    }
    out
}

/// The crate graph is what docs/ARCHITECTURE.md draws, edge for edge: a new dependency
/// between the workspace's crates starts with its row there.
#[test]
fn the_crate_graph_is_the_one_the_architecture_draws() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let documented = documented_crates();
    assert!(
        documented.len() >= 6,
        "docs/ARCHITECTURE.md has its crates table: {documented:?}"
    );
    let mut manifests = vec![root.join("Cargo.toml")];
    manifests.extend(
        std::fs::read_dir(root.join("crates"))
            .unwrap()
            .map(|e| e.unwrap().path().join("Cargo.toml")),
    );
    let mut actual = std::collections::BTreeMap::new();
    for path in &manifests {
        let krate = manifest(path);
        let name = krate["package"]["name"].as_str().unwrap().to_owned();
        let dir = path.parent().unwrap().strip_prefix(root).unwrap().display().to_string();
        let dir = if dir.is_empty() { ".".to_owned() } else { dir };
        actual.insert(name, (dir, workspace_edges(&krate)));
    }
    assert_eq!(
        actual, documented,
        "the crates' manifests (left) against docs/ARCHITECTURE.md's crates table (right)"
    );
}
