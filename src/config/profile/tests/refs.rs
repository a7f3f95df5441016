//! The official client's value forms: Go durations, value, path, proxy and secret
//! references.

use std::time::Duration;

use super::super::refs::{duration_text, go_duration, path, proxy, secret, value};
use super::*;

#[test]
fn go_durations_are_read_as_go_reads_them_and_written_exactly() {
    let cases = [
        ("30s", Duration::from_secs(30), "30s"),
        ("30000ms", Duration::from_secs(30), "30s"),
        ("5000ms", Duration::from_secs(5), "5s"),
        ("1m30s", Duration::from_secs(90), "90s"),
        ("1.5s", Duration::from_millis(1500), "1500ms"),
        ("10m", Duration::from_secs(600), "10m"),
        ("2h", Duration::from_secs(7200), "2h"),
        ("1h0m0s", Duration::from_secs(3600), "1h"),
        ("250us", Duration::from_micros(250), "250us"),
        ("250µs", Duration::from_micros(250), "250us"),
        ("7ns", Duration::from_nanos(7), "7ns"),
        ("0", Duration::ZERO, "0s"),
        ("+.5m", Duration::from_secs(30), "30s"),
    ];
    for (text, want, shown) in cases {
        let got = go_duration(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(got, want, "{text}");
        assert_eq!(duration_text(got), shown, "{text}");
        assert_eq!(
            humantime::parse_duration(shown).unwrap(),
            want,
            "tunnelgate reads {shown}"
        );
    }
    for bad in ["", "30", "1d", "s", "1..5s", "-1s", "30 s", "1.s5"] {
        assert!(go_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_value_reference_is_resolved_from_the_environment_or_a_file_and_trimmed() {
    let vars = EnvVars::new(&env(&[("URL", " https://x \n"), ("EMPTY", " ")]));
    let literal = value(" https://lit ", &vars).unwrap();
    assert_eq!((literal.value.as_str(), literal.from), ("https://lit", None));
    let from_env = value("ENV: URL", &vars).unwrap();
    assert_eq!(from_env.value, "https://x");
    assert_eq!(from_env.from.as_deref(), Some("env:URL"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("url");
    std::fs::write(&file, "https://from-file\n").unwrap();
    assert_eq!(
        value(&format!("file:{}", file.display()), &vars).unwrap().value,
        "https://from-file"
    );
    assert!(value("env:EMPTY", &vars).unwrap_err().contains("empty"));
    assert!(value("env:NOPE", &vars).unwrap_err().contains("NOPE, which is not set"));
    assert!(value("file:/nonexistent/x", &vars).unwrap_err().contains("cannot read"));
    assert!(value("  ", &vars).unwrap_err().contains("empty"));
}

#[test]
fn a_path_reference_names_a_path_and_blank_is_unset() {
    let vars = EnvVars::new(&env(&[("CA", "/etc/ca.pem")]));
    assert_eq!(path("/p.pem", &vars).unwrap().unwrap().value, "/p.pem");
    assert_eq!(path("FILE:/p.pem", &vars).unwrap().unwrap().value, "/p.pem");
    assert_eq!(path("env:CA", &vars).unwrap().unwrap().value, "/etc/ca.pem");
    assert_eq!(path(" ", &vars).unwrap(), None);
    assert!(path("file:", &vars).is_err());
    assert!(path("env:MISSING", &vars).is_err());
}

#[test]
fn a_proxy_is_an_http_url_or_an_env_reference_kept_as_one() {
    assert_eq!(proxy("http://p:3128").unwrap(), "http://p:3128");
    assert_eq!(proxy(" https://u:pw@p:3128 ").unwrap(), "https://u:pw@p:3128");
    assert_eq!(proxy("env: HTTPS_PROXY").unwrap(), "env:HTTPS_PROXY");
    for bad in ["", "p:3128", "socks5://p:1080", "file:/p", "ENV:X", "env:1X"] {
        assert!(proxy(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_secret_becomes_tunnelgates_lowercase_reference_or_stays_a_literal() {
    assert_eq!(secret("ENV:KEY").unwrap(), "env:KEY");
    assert_eq!(secret("File: /run/k ").unwrap(), "file:/run/k");
    assert_eq!(secret("sk-literal").unwrap(), "sk-literal");
    assert!(secret("file:").is_err());
    assert!(secret("env:A-B").is_err());
    assert!(secret(" ").is_err());
}
