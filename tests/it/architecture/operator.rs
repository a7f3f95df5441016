//! The library's hidden `operator` module (docs/ARCHITECTURE.md, "Crates"): the binary's
//! view of the gateway, item by item. The compiler holds that the binary reaches nothing
//! else (every other module is private) and that the library cannot reach the binary; what
//! it cannot hold is that each item named there is there because the binary uses it, and
//! that no test, example or fuzz target reaches through it instead of the embedding API.

use std::collections::BTreeSet;
use std::path::Path;

use super::{code_of, modules, modules_of};

/// Every name `src/operator.rs` re-exports (`pub use crate::...::{a, b};`, `pub use
/// crate::...::c;` and `pub use some_crate as d;`).
fn reexported() -> BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/operator.rs")).unwrap();
    let code = code_of(&text);
    let mut out = BTreeSet::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else { continue };
        let path = statement[at + "pub use ".len()..].trim();
        let names = match path.split_once('{') {
            Some((_, group)) => group.trim_end_matches('}').split(',').map(str::trim).collect(),
            None => vec![path.rsplit([':', ' ']).next().unwrap_or_default()],
        };
        out.extend(names.into_iter().filter(|n| !n.is_empty()).map(str::to_owned));
    }
    assert!(out.len() > 20, "read the re-exports of src/operator.rs: {out:?}");
    out
}

/// The non-test code of the binary's modules (those `src/main.rs` declares), one string.
fn binary_code() -> String {
    let binary = modules_of("src/main.rs");
    assert!(binary.contains("cli"), "src/main.rs declares the commands: {binary:?}");
    let mut code = String::new();
    for (module, path) in modules() {
        if module.first().is_some_and(|m| binary.contains(m)) {
            code.push_str(&code_of(&std::fs::read_to_string(path).unwrap()));
        }
    }
    code
}

#[test]
fn every_item_the_operator_module_names_is_used_by_the_binary() {
    let code = binary_code();
    let word = |name: &str| {
        code.match_indices(name).any(|(at, _)| {
            let before = code[..at].chars().next_back();
            let after = code[at + name.len()..].chars().next();
            let edge = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            edge(before) && edge(after)
        })
    };
    let unused: Vec<String> = reexported().into_iter().filter(|name| !word(name)).collect();
    assert!(
        unused.is_empty(),
        "src/operator.rs names what the binary's modules never use; make them pub(crate) again: {unused:?}"
    );
}

#[test]
fn no_test_example_or_fuzz_target_reaches_through_the_operator_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let needle = ["tunnelgate", "operator"].join("::");
    let mut reaching: Vec<String> = super::workspace::every_rust_file()
        .into_iter()
        .filter(|path| !path.starts_with(root.join("src")))
        .filter(|path| std::fs::read_to_string(path).unwrap().contains(&needle))
        .map(|path| path.strip_prefix(root).unwrap().display().to_string())
        .collect();
    reaching.sort();
    assert!(
        reaching.is_empty(),
        "only the binary takes the operator module; tests use the embedding API, the binary or a crate's own API: {reaching:?}"
    );
}
