use std::path::PathBuf;

use super::*;

#[test]
fn receipts_are_on_by_default_beside_the_latch_file() {
    let config = accepted(MINIMAL);
    assert!(config.receipts.enabled);
    assert_eq!(
        config.receipts.path,
        PathBuf::from("/var/lib/tunnelgate/receipts.jsonl")
    );
    let moved = accepted(&toml_with(&[("strict.latch_file", "\"/srv/gw/state/latch.json\"")]));
    assert_eq!(moved.receipts.path, PathBuf::from("/srv/gw/state/receipts.jsonl"));
    let relative = accepted(&toml_with(&[("strict.latch_file", "\"latch.json\"")]));
    assert_eq!(relative.receipts.path, PathBuf::from("receipts.jsonl"));
    let flag = Overrides {
        latch_file: Some(PathBuf::from("/run/gw/latch.json")),
        ..Overrides::default()
    };
    let overridden = load(MINIMAL, &flag, &[]).unwrap();
    assert_eq!(
        overridden.receipts.path,
        PathBuf::from("/run/gw/receipts.jsonl"),
        "--latch-file moves the default too"
    );
}

#[test]
fn receipts_keys_are_read_from_the_file_and_from_their_env_form() {
    let config = accepted(&toml_with(&[
        ("receipts.enabled", "false"),
        ("receipts.path", "\"/logs/receipts.jsonl\""),
    ]));
    assert!(!config.receipts.enabled);
    assert_eq!(config.receipts.path, PathBuf::from("/logs/receipts.jsonl"));
    let env_set = load(
        MINIMAL,
        &Overrides::default(),
        &[
            ("TUNNELGATE_RECEIPTS__ENABLED", "false"),
            ("TUNNELGATE_RECEIPTS__PATH", "/env/receipts.jsonl"),
        ],
    )
    .unwrap();
    assert!(!env_set.receipts.enabled);
    assert_eq!(env_set.receipts.path, PathBuf::from("/env/receipts.jsonl"));
    let masked = config.masked();
    assert!(
        masked.contains("[receipts]\nenabled = false\npath = \"/logs/receipts.jsonl\""),
        "{masked}"
    );
}

#[test]
fn an_empty_or_directory_receipts_path_is_refused_naming_the_key() {
    assert_error(
        &rejected(&toml_with(&[("receipts.path", "\"\"")])),
        "receipts.path",
        "is empty; give a file path, e.g. \"/var/lib/tunnelgate/receipts.jsonl\", or set receipts.enabled = false",
    );
    assert_error(
        &rejected(&toml_with(&[("receipts.path", "\"/var/log/\"")])),
        "receipts.path",
        "\"/var/log/\" names a directory; give a file path, e.g. \"/var/log/receipts.jsonl\"",
    );
    let unknown = rejected(&toml_with(&[("receipts.max_bytes", "1")]));
    assert!(unknown.to_string().contains("max_bytes"), "{unknown}");
}
