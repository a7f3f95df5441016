//! `runtime.pid_file` and `ops.url_file`: a path in a directory that exists, set in the
//! file, by `TUNNELGATE_*` or by the official `PID_FILE` / `HEALTH_URL_FILE`.

use std::path::PathBuf;

use super::*;

#[test]
fn a_run_file_in_an_existing_directory_is_taken_and_shown_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("gw.pid");
    let url = dir.path().join("gw.url");
    let toml = toml_with(&[
        ("runtime.pid_file", &format!("{:?}", pid.display().to_string())),
        ("ops.url_file", &format!("{:?}", url.display().to_string())),
    ]);
    let config = accepted(&toml);
    assert_eq!(config.runtime.pid_file, Some(pid.clone()));
    assert_eq!(config.ops.url_file, Some(url.clone()));
    let masked = config.masked();
    assert!(
        masked.contains(&format!("pid_file = {:?}", pid.display().to_string())),
        "{masked}"
    );
    assert!(
        masked.contains(&format!("url_file = {:?}", url.display().to_string())),
        "{masked}"
    );
    assert!(!accepted(MINIMAL).masked().contains("pid_file"), "unset, not shown");
}

#[test]
fn a_missing_directory_an_empty_path_or_a_directory_is_an_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent").join("x");
    for key in ["runtime.pid_file", "ops.url_file"] {
        let cases = [
            (format!("{:?}", missing.display().to_string()), "does not exist"),
            ("\"\"".to_owned(), "is empty"),
            (format!("{:?}", dir.path().display().to_string()), "names a directory"),
            ("\"/tmp/\"".to_owned(), "names a directory"),
        ];
        for (value, problem) in cases {
            let error = rejected(&toml_with(&[(key, &value)]));
            assert_eq!(error.key(), key);
            assert!(error.problem().contains(problem), "{key} = {value}: {error}");
        }
    }
}

#[test]
fn the_official_pid_file_and_health_url_file_set_them_below_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let from_env = |name: &str| dir.path().join(name).display().to_string();
    let pairs = [
        ("PID_FILE", from_env("env.pid")),
        ("HEALTH_URL_FILE", from_env("env.url")),
    ];
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = load(MINIMAL, &Overrides::default(), &pairs).expect("valid");
    assert_eq!(config.runtime.pid_file, Some(PathBuf::from(from_env("env.pid"))));
    assert_eq!(config.ops.url_file, Some(PathBuf::from(from_env("env.url"))));
    let file = toml_with(&[("runtime.pid_file", &format!("{:?}", from_env("file.pid")))]);
    let config = load(&file, &Overrides::default(), &pairs).expect("valid");
    assert_eq!(config.runtime.pid_file, Some(PathBuf::from(from_env("file.pid"))));
    let error = load(
        MINIMAL,
        &Overrides::default(),
        &[("PID_FILE", "/nonexistent/dir/x.pid")],
    )
    .unwrap_err();
    assert!(error.problem().ends_with("(set by PID_FILE)"), "{error}");
}
