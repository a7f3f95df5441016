//! The doctor's verdicts and how they are printed (pure).
//!
//! One [`Check`] per preflight: a stable name, a [`Verdict`] and a one-line detail. The
//! [`Report`] aggregates them: it passes when no check failed (warnings allowed), and is
//! rendered for people (one aligned line per check, then the verdict line) or for
//! machines (`{"checks": [{name, status, detail}], "ok": bool}`). Details are written by
//! the checks and already free of secrets and URLs; nothing here adds any.

use serde::Serialize;

/// How one check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// Works as the runtime needs it.
    Ok,
    /// Not a failure, but worth reading (skipped, or works with a caveat).
    Warn,
    /// The runtime would fail here, or could not be shown to work.
    Fail,
}

/// One preflight's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    /// Stable: `config`, `control_plane`, `channel.NAME`, `coordination`, `latch_dir`, `ops_listen`,
    /// `latch_file`.
    pub name: String,
    #[serde(rename = "status")]
    pub verdict: Verdict,
    /// One line: what was found and, when it is not `ok`, what to do (naming the key).
    pub detail: String,
}

/// Every check of one doctor run, in the order they are printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub checks: Vec<Check>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    checks: &'a [Check],
    ok: bool,
}

impl Verdict {
    /// The word in the human output: `ok`, `warn` or `FAIL` (loud on purpose).
    pub(crate) fn as_human(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
        }
    }
}

impl Check {
    pub(crate) fn new(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            verdict,
            detail: one_line(detail.into()),
        }
    }

    pub(crate) fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Ok, detail)
    }

    pub(crate) fn warn(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Warn, detail)
    }

    pub(crate) fn fail(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Fail, detail)
    }
}

impl Report {
    /// How many checks failed.
    pub(crate) fn failed(&self) -> usize {
        self.count(Verdict::Fail)
    }

    /// True when no check failed (warnings allowed).
    pub(crate) fn passed(&self) -> bool {
        self.failed() == 0
    }

    /// `0` when every check passed, `1` otherwise. (An invalid configuration exits `78`;
    /// that is the caller's decision, as for `tunnelgate check`.)
    pub(crate) fn exit_code(&self) -> u8 {
        if self.passed() {
            0
        } else {
            1
        }
    }

    /// `doctor: all N checks passed` (with the warnings counted), or
    /// `doctor: K of N checks failed`.
    pub(crate) fn verdict_line(&self) -> String {
        let total = self.checks.len();
        let noun = if total == 1 { "check" } else { "checks" };
        match (self.failed(), self.count(Verdict::Warn)) {
            (0, 0) => format!("doctor: all {total} {noun} passed"),
            (0, 1) => format!("doctor: all {total} {noun} passed (1 warning)"),
            (0, warnings) => format!("doctor: all {total} {noun} passed ({warnings} warnings)"),
            (failed, _) => format!("doctor: {failed} of {total} {noun} failed"),
        }
    }

    /// One aligned line per check, then the verdict line; ends with a newline.
    pub(crate) fn render_human(&self) -> String {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for check in &self.checks {
            let line = format!(
                "{:<4}  {:<width$}  {}",
                check.verdict.as_human(),
                check.name,
                check.detail
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(&self.verdict_line());
        out.push('\n');
        out
    }

    /// `{"checks": [{"name", "status", "detail"}], "ok": bool}`, pretty-printed, with a
    /// final newline. `status` is `ok`, `warn` or `fail`.
    pub(crate) fn render_json(&self) -> String {
        let doc = JsonReport {
            checks: &self.checks,
            ok: self.passed(),
        };
        let mut text = serde_json::to_string_pretty(&doc).expect("a report serializes");
        text.push('\n');
        text
    }

    fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }
}

/// Keeps a detail on one line: control characters (a newline from an OS message, say)
/// become spaces.
fn one_line(text: String) -> String {
    if text.chars().any(char::is_control) {
        text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(verdicts: &[Verdict]) -> Report {
        Report {
            checks: verdicts
                .iter()
                .enumerate()
                .map(|(i, v)| Check::new(format!("check{i}"), *v, "detail"))
                .collect(),
        }
    }

    #[test]
    fn the_verdict_counts_failures_and_allows_warnings() {
        use Verdict::{Fail, Ok, Warn};
        let cases: [(&[Verdict], bool, u8, &str); 6] = [
            (&[Ok, Ok, Ok], true, 0, "doctor: all 3 checks passed"),
            (&[Ok, Warn], true, 0, "doctor: all 2 checks passed (1 warning)"),
            (&[Warn, Warn, Ok], true, 0, "doctor: all 3 checks passed (2 warnings)"),
            (&[Ok, Fail, Warn], false, 1, "doctor: 1 of 3 checks failed"),
            (&[Fail, Fail], false, 1, "doctor: 2 of 2 checks failed"),
            (&[Fail], false, 1, "doctor: 1 of 1 check failed"),
        ];
        for (verdicts, passed, code, line) in cases {
            let r = report(verdicts);
            assert_eq!(r.passed(), passed, "{verdicts:?}");
            assert_eq!(r.exit_code(), code, "{verdicts:?}");
            assert_eq!(r.verdict_line(), line, "{verdicts:?}");
        }
    }

    #[test]
    fn human_output_is_one_aligned_line_per_check_then_the_verdict() {
        let r = Report {
            checks: vec![
                Check::ok("config", "valid"),
                Check::fail("control_plane", "credentials refused"),
                Check::warn("latch_dir", "skipped"),
            ],
        };
        assert_eq!(
            r.render_human(),
            "ok    config         valid\n\
             FAIL  control_plane  credentials refused\n\
             warn  latch_dir      skipped\n\
             doctor: 1 of 3 checks failed\n"
        );
    }

    #[test]
    fn json_output_has_checks_with_name_status_detail_and_ok() {
        let r = Report {
            checks: vec![Check::ok("config", "valid"), Check::warn("latch_dir", "skipped")],
        };
        let doc: serde_json::Value = serde_json::from_str(&r.render_json()).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({
                "checks": [
                    {"name": "config", "status": "ok", "detail": "valid"},
                    {"name": "latch_dir", "status": "warn", "detail": "skipped"},
                ],
                "ok": true,
            })
        );
        let failed = report(&[Verdict::Fail]);
        let doc: serde_json::Value = serde_json::from_str(&failed.render_json()).unwrap();
        assert_eq!(doc["ok"], false);
        assert_eq!(doc["checks"][0]["status"], "fail");
    }

    #[test]
    fn details_stay_on_one_line() {
        let c = Check::fail("x", "first\nsecond\r\tthird");
        assert_eq!(c.detail, "first second  third");
        assert_eq!(report(&[]).render_human(), "doctor: all 0 checks passed\n");
    }
}
