//! What of an MCP server's own text may reach the gateway's log or `/status` (pure): a
//! stdio child's stderr lines, and the server identity strings of `identity`.
//!
//! A child's stderr is untrusted text that may carry credentials. Each line is cleaned of
//! control characters, stripped of anything that looks like a secret (assignments to
//! sensitive-looking names, `Bearer`/`Basic` credentials, long mixed hex/base64 runs) and
//! truncated to [`MAX_LOGGED_LINE`] bytes. [`LogBudget`] bounds how many lines per second
//! are logged at all. Over-redaction is accepted; a leak is not.

use tokio::time::Instant;

/// What replaces a redacted value.
pub(super) const REDACTED: &str = "[redacted]";

/// Appended to a line that was cut.
pub(super) const TRUNCATED: &str = " [truncated]";

/// Longest logged line, in bytes (before the truncation marker).
pub(super) const MAX_LOGGED_LINE: usize = 2048;

/// Bytes of one stderr line read at most: redaction sees more than is logged, so a secret
/// straddling the cut is redacted whole before the cut.
pub(super) const MAX_READ_LINE: usize = 2 * MAX_LOGGED_LINE;

/// Name fragments whose assigned value is redacted (`api_key=...`, `"token": "..."`).
const SENSITIVE_NAMES: [&str; 10] = [
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "auth",
    "credential",
    "cookie",
    "signature",
    "session",
];

/// Words followed by a credential wherever they appear (`... Bearer abc`).
const SCHEMES: [&str; 2] = ["bearer", "basic"];

/// Words followed by a credential when they are the value of a sensitive name
/// (`Authorization: token abc`).
const VALUE_SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

/// A run of hex/base64-ish characters at least this long, mixing letters and digits, is
/// taken for a secret.
const MIN_SECRET_RUN: usize = 24;

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

fn is_run_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-')
}

fn ends_value(c: char, quote: Option<char>) -> bool {
    match quote {
        Some(q) => c == q,
        None => c.is_whitespace() || matches!(c, ',' | ';' | '&' | '}' | ')' | ']' | '"' | '\''),
    }
}

/// The loggable form of one stderr line (also what `/status` may show of a server's own
/// strings: `identity`).
pub(super) fn redact_line(line: &str) -> String {
    let cleaned: Vec<char> = line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let assigned = redact_assignments(&cleaned);
    let mut out = redact_runs(&assigned);
    if out.len() > MAX_LOGGED_LINE {
        let mut cut = MAX_LOGGED_LINE;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(TRUNCATED);
    }
    out
}

/// Index just past the spaces starting at `i`.
fn skip_spaces(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i] == ' ' {
        i += 1;
    }
    i
}

/// Index just past the word (non-whitespace run) starting at `i`.
fn skip_word(c: &[char], mut i: usize) -> usize {
    while i < c.len() && !c[i].is_whitespace() {
        i += 1;
    }
    i
}

fn redact_assignments(c: &[char]) -> Vec<char> {
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        if !is_name_char(c[i]) || (i > 0 && is_name_char(c[i - 1])) {
            out.push(c[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < c.len() && is_name_char(c[i]) {
            i += 1;
        }
        out.extend_from_slice(&c[start..i]);
        let name: String = c[start..i].iter().collect::<String>().to_lowercase();
        if SCHEMES.contains(&name.as_str()) {
            // `Bearer <credential>`
            let value = skip_spaces(c, i);
            if value > i && value < c.len() && !c[value].is_whitespace() {
                out.extend_from_slice(&c[i..value]);
                out.extend(REDACTED.chars());
                i = skip_word(c, value);
                continue;
            }
        }
        if !SENSITIVE_NAMES.iter().any(|k| name.contains(k)) {
            continue;
        }
        // `name=value`, `name: value`, `"name": "value"`
        let mut j = i;
        if j < c.len() && matches!(c[j], '"' | '\'') {
            j += 1;
        }
        j = skip_spaces(c, j);
        if j >= c.len() || !matches!(c[j], '=' | ':') {
            continue;
        }
        j = skip_spaces(c, j + 1);
        let quote = c.get(j).copied().filter(|q| matches!(q, '"' | '\''));
        if quote.is_some() {
            j += 1;
        }
        let value_start = j;
        while j < c.len() && !ends_value(c[j], quote) {
            j += 1;
        }
        if j == value_start {
            continue;
        }
        // `Authorization: Bearer abc`: the scheme word and the credential after it.
        let value: String = c[value_start..j].iter().collect::<String>().to_lowercase();
        if quote.is_none() && VALUE_SCHEMES.contains(&value.as_str()) {
            let next = skip_spaces(c, j);
            if next > j && next < c.len() && !c[next].is_whitespace() {
                j = skip_word(c, next);
            }
        }
        out.extend_from_slice(&c[i..value_start]);
        out.extend(REDACTED.chars());
        i = j;
    }
    out
}

fn redact_runs(c: &[char]) -> String {
    let mut out = String::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        if !is_run_char(c[i]) {
            out.push(c[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < c.len() && is_run_char(c[i]) {
            i += 1;
        }
        let run = &c[start..i];
        let secret_like = run.len() >= MIN_SECRET_RUN
            && run.iter().any(char::is_ascii_digit)
            && run.iter().any(char::is_ascii_alphabetic);
        if secret_like {
            out.push_str(REDACTED);
        } else {
            out.extend(run);
        }
    }
    out
}

/// A token bucket for stderr lines: bursts of [`LogBudget::BURST`], then
/// [`LogBudget::PER_SECOND`] lines a second; what is over the budget is counted, and the
/// count is reported with the next line that fits.
#[derive(Debug)]
pub(super) struct LogBudget {
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

impl LogBudget {
    pub(super) const BURST: f64 = 100.0;
    pub(super) const PER_SECOND: f64 = 20.0;

    pub(super) fn new(now: Instant) -> Self {
        Self {
            tokens: Self::BURST,
            last: now,
            suppressed: 0,
        }
    }

    /// `Some(n)`: log this line (and say that `n` lines were suppressed before it);
    /// `None`: over budget, skip it.
    pub(super) fn admit(&mut self, now: Instant) -> Option<u64> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + elapsed * Self::PER_SECOND).min(Self::BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests;
