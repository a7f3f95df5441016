use std::time::Duration;

use super::*;

#[test]
fn ordinary_lines_pass_unchanged() {
    for line in [
        "server listening on stdio",
        "loaded 12 tools in 35 ms",
        "warning: retrying request 3 of 5",
        "python3.11 ready, pid 4242",
        "naïve café — ok",
    ] {
        assert_eq!(redact_line(line), line);
    }
}

#[test]
fn assignments_to_sensitive_names_are_redacted() {
    let cases = [
        ("api_key=sk-live-123 next", "api_key=[redacted] next"),
        ("API-KEY: abc def", "API-KEY: [redacted] def"),
        ("token=abc&user=bob", "token=[redacted]&user=bob"),
        ("password = 'hunter two'", "password = '[redacted]'"),
        (
            r#"{"access_token": "abc", "n": 1}"#,
            r#"{"access_token": "[redacted]", "n": 1}"#,
        ),
        ("session_id=42;path=/", "session_id=[redacted];path=/"),
        ("key: ", "key: "),
        ("unterminated secret=\"abc def", "unterminated secret=\"[redacted]"),
    ];
    for (line, want) in cases {
        assert_eq!(redact_line(line), want, "{line}");
    }
}

#[test]
fn credentials_after_an_auth_scheme_are_redacted() {
    let cases = [
        ("Authorization: Bearer abc.def.ghi", "Authorization: [redacted]"),
        (
            "sending bearer xyz to upstream",
            "sending bearer [redacted] to upstream",
        ),
        ("Basic dXNlcjpwYXNz", "Basic [redacted]"),
        ("Authorization: token ghp_abc", "Authorization: [redacted]"),
        ("invalid token format", "invalid token format"),
    ];
    for (line, want) in cases {
        assert_eq!(redact_line(line), want, "{line}");
    }
}

#[test]
fn long_hex_and_base64_runs_are_redacted() {
    let cases = [
        (
            "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 done",
            "sha [redacted] done",
        ),
        ("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", "[redacted]"),
        (
            "jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.x",
            "jwt [redacted].[redacted].x",
        ),
        ("id 123e4567-e89b-12d3-a456-426614174000", "id [redacted]"),
        ("dGhpcyBpcyBhIHNlY3JldCB2YWx1ZQ1+/= tail", "[redacted] tail"),
    ];
    for (line, want) in cases {
        assert_eq!(redact_line(line), want, "{line}");
    }
    // Long runs of only letters or only digits are words and numbers, not secrets.
    let plain = "abcdefghijklmnopqrstuvwxyzabcdef 12345678901234567890123456789";
    assert_eq!(redact_line(plain), plain);
}

#[test]
fn control_characters_never_reach_the_log() {
    assert_eq!(redact_line("a\u{1b}[31mred\u{7}\tb\r"), "a [31mred  b ");
}

#[test]
fn long_lines_are_truncated_on_a_char_boundary() {
    let line = "é".repeat(MAX_LOGGED_LINE);
    let out = redact_line(&line);
    assert!(out.ends_with(" [truncated]"));
    assert!(out.len() <= MAX_LOGGED_LINE + " [truncated]".len());
    let short = "x ".repeat(10);
    assert_eq!(redact_line(&short), short);
}

#[test]
fn the_budget_allows_a_burst_then_a_steady_rate_and_reports_what_it_skipped() {
    let t0 = Instant::now();
    let mut budget = LogBudget::new(t0);
    for _ in 0..100 {
        assert_eq!(budget.admit(t0), Some(0));
    }
    assert_eq!(budget.admit(t0), None);
    assert_eq!(budget.admit(t0), None);
    // 20 lines a second: one line's worth after 50 ms.
    assert_eq!(budget.admit(t0 + Duration::from_millis(50)), Some(2));
    assert_eq!(budget.admit(t0 + Duration::from_millis(50)), None);
    // A long pause refills to the burst, not beyond.
    let later = t0 + Duration::from_secs(3600);
    for _ in 0..100 {
        assert!(budget.admit(later).is_some());
    }
    assert_eq!(budget.admit(later), None);
}
