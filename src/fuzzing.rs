//! Fuzz and property targets for the decoders that take outside input: the poll envelope,
//! the SSE parser, the `response_timeout` grammar, the stdio line reader and the config
//! loader. Compiled only for tests and fuzz builds (`--cfg fuzzing`, set by `cargo fuzz`
//! alone: no feature turns it on); not part of the API.
//!
//! Each target takes arbitrary bytes, must never panic, and asserts the decoder's contract
//! and its size bound (the "bounded memory" half: what a decoder keeps is bounded by its
//! cap or by its input, never more). The same functions run in two places:
//! - under libFuzzer through `cargo fuzz` (`fuzz/`, driven by `scripts/fuzz`);
//! - in the suite (`fuzzing/tests.rs`): every committed corpus and regression input, and
//!   a bounded number of proptest mutations of them.
//!
//! Where a target needs more than bytes (a chunk size, a line bound), it takes it from the
//! first bytes of the input, so the fuzzer explores those choices too.

use std::time::Duration;

use crate::config::{ChannelConfig, Config};
use crate::downstream::line_probe::{self, LineClass};
use crate::downstream::{SseEvent, SseParser};
use crate::protocol::{decode_poll, CommandKind, ResponseTimeout};

/// A target: takes any bytes, panics only when a property is broken.
#[cfg(test)]
pub(crate) type Target = fn(&[u8]);

/// Every target, by the name its corpus directory and fuzz binary carry (for the suite;
/// the fuzz binaries name their target themselves).
#[cfg(test)]
pub(crate) const TARGETS: [(&str, Target); 5] = [
    ("poll_envelope", poll_envelope),
    ("sse_stream", sse_stream),
    ("response_timeout", response_timeout),
    ("stdio_lines", stdio_lines),
    ("config", config),
];

/// The poll body decoder: a list that parses yields one result per command, a malformed
/// command is a stable reason (never a panic), and nothing decoded outgrows the body.
pub fn poll_envelope(data: &[u8]) {
    let Ok(commands) = decode_poll(data) else {
        return;
    };
    // Every command takes at least `{}` of the body.
    assert!(commands.len() * 2 <= data.len(), "more commands than the body can hold");
    let mut kept = 0;
    for command in &commands {
        match command {
            Ok(command) => {
                assert!(
                    !command.request_id.as_str().is_empty(),
                    "a command without a request id"
                );
                let _ = command.response_timeout.budget();
                if let CommandKind::JsonRpc(payload) = &command.kind {
                    let raw = payload.raw().get();
                    assert!(
                        raw.trim_start().starts_with('{'),
                        "a JSON-RPC payload that is no object"
                    );
                    kept += raw.len();
                    let _ = (payload.method(), payload.id(), payload.tool_name());
                    let _ = (payload.expects_response(), payload.is_reply());
                }
            }
            Err(invalid) => {
                let reason = invalid.reason.as_str();
                assert!(
                    !reason.is_empty() && reason.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                    "an unstable reason label: {reason:?}"
                );
            }
        }
    }
    // Payloads are kept byte for byte, each a disjoint part of the body.
    assert!(kept <= data.len(), "payloads outgrew the body");
}

/// The SSE parser: where the chunks fall never changes the events; what it holds is
/// bounded by what it was fed and is gone once the event ends; events carry no line ends.
/// The first byte picks the chunk size (1 to 16 bytes).
pub fn sse_stream(data: &[u8]) {
    let Some((&plan, stream)) = data.split_first() else {
        return;
    };
    let chunk = 1 + usize::from(plan % 16);

    let mut whole = SseParser::new();
    let mut whole_events = Vec::new();
    whole.feed(stream, &mut whole_events);

    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut fed = 0;
    for piece in stream.chunks(chunk) {
        parser.feed(piece, &mut events);
        fed += piece.len();
        assert!(parser.buffered() <= fed, "the parser holds more than it was fed");
    }
    assert_eq!(events, whole_events, "chunks of {chunk} changed the events");
    assert_eq!(parser.last_event_id(), whole.last_event_id());
    assert_eq!(parser.retry_ms(), whole.retry_ms());

    // Invalid UTF-8 becomes U+FFFD (as the SSE standard says): one byte may become three,
    // never more (found by the fuzzer, which first held this to one).
    let data_bytes: usize = events.iter().map(|e| e.data.len()).sum();
    assert!(data_bytes <= 3 * stream.len(), "events outgrew the stream");
    for event in &events {
        assert_event_is_clean(event);
    }

    // Ending the line and the event releases everything but the id and the retry hint.
    parser.feed(b"\n\n", &mut events);
    assert_eq!(parser.buffered(), 0, "bytes held after the event ended");
    for event in &events {
        assert_event_is_clean(event);
    }
    let resumed = parser.resumed();
    assert_eq!(resumed.buffered(), 0);
    assert_eq!(resumed.last_event_id(), parser.last_event_id());
    assert_eq!(resumed.retry_ms(), parser.retry_ms());
}

fn assert_event_is_clean(event: &SseEvent) {
    assert!(!event.event.is_empty(), "an event without a type");
    assert!(!event.event.contains(['\r', '\n']), "a line end in an event type");
    assert!(!event.data.contains('\r'), "a CR in event data");
    assert!(
        !event.id.contains(['\r', '\n', '\0']),
        "a line end or NUL in an event id"
    );
}

/// The `response_timeout` grammar `1*DIGIT ("ns" / "us" / "ms" / "s" / "m" / "h")`: only
/// the grammar yields a budget, and the budget is exact (checked against 128-bit
/// arithmetic); values too large for a duration fail open.
pub fn response_timeout(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // the field is a JSON string: always UTF-8
    };
    let parsed = ResponseTimeout::parse(text);
    assert_eq!(
        ResponseTimeout::from_json(Some(&serde_json::Value::String(text.to_owned()))),
        parsed,
        "the JSON string and the text parse alike"
    );
    let expected = grammar_nanos(text);
    match (parsed, expected) {
        (ResponseTimeout::Within(d), Some(Some(nanos))) => assert_eq!(d.as_nanos(), nanos, "{text:?}"),
        (ResponseTimeout::Within(d), _) => panic!("{text:?} is outside the grammar or too large, yet gave {d:?}"),
        (ResponseTimeout::Unbounded, Some(Some(nanos))) => panic!("{text:?} ({nanos} ns) failed open"),
        (ResponseTimeout::Unbounded, _) => {}
    }
}

/// `None`: outside the grammar. `Some(None)`: in the grammar but too large. Otherwise the
/// budget in nanoseconds.
fn grammar_nanos(text: &str) -> Option<Option<u128>> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, unit) = text.split_at(digits);
    let (nanos_per_unit, max_units): (u128, u128) = match unit {
        "ns" | "us" | "ms" | "s" => (
            match unit {
                "ns" => 1,
                "us" => 1_000,
                "ms" => 1_000_000,
                _ => 1_000_000_000,
            },
            u128::from(u64::MAX),
        ),
        "m" => (60_000_000_000, u128::from(u64::MAX) / 60),
        "h" => (3_600_000_000_000, u128::from(u64::MAX) / 3600),
        _ => return None,
    };
    let value = number.trim_start_matches('0');
    if value.len() > 20 {
        return Some(None); // more than u64 holds
    }
    let n: u128 = if value.is_empty() {
        0
    } else {
        value.parse().expect("at most 20 digits")
    };
    if n > u128::from(u64::MAX) || n > max_units {
        return Some(None);
    }
    Some(Some(n * nanos_per_unit))
}

/// The stdio line reader: lines are what the bytes say (split at `\n`, a last partial
/// line included), no line keeps more than the bound, lengths are exact, and the
/// classifier keeps only JSON objects. Byte 0 sets the bound (1 to 64), byte 1 whether an
/// overflowing line keeps its prefix and the read size (1 to 128).
pub fn stdio_lines(data: &[u8]) {
    let [bound, mode, stream @ ..] = data else {
        return;
    };
    let max = 1 + usize::from(bound % 64);
    let keep_prefix = mode & 1 == 1;
    let chunk = 1 + usize::from(mode >> 1);
    let lines = line_probe::read_all(stream, max, keep_prefix, chunk);

    let mut expected: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    if expected.last().is_some_and(|last| last.is_empty()) {
        expected.pop(); // input ending in `\n` (or empty): no last partial line
    }
    assert_eq!(lines.len(), expected.len(), "line count");
    for (line, want) in lines.iter().zip(expected) {
        assert_eq!(line.len, want.len(), "line length");
        assert!(line.bytes.len() <= max, "a line kept more than the bound");
        assert_eq!(line.overflow, want.len() > max, "overflow flag");
        let kept: &[u8] = match (line.overflow, keep_prefix) {
            (false, _) => want,
            (true, true) => &want[..max],
            (true, false) => &[],
        };
        assert_eq!(line.bytes, kept, "kept bytes");
        match &line.class {
            LineClass::Response { raw, .. } | LineClass::Message(raw) => {
                assert!(raw.starts_with('{') && raw.ends_with('}'), "kept a non-object: {raw:?}");
                // Valid JSON, kept byte for byte: not necessarily a `serde_json::Value`
                // (`1e999` is JSON, but no f64; found by the fuzzer).
                let _: serde::de::IgnoredAny = serde_json::from_str(raw).expect("kept JSON");
            }
            LineClass::Blank => assert!(
                std::str::from_utf8(&line.bytes).is_ok_and(|s| s.trim_matches([' ', '\t', '\r', '\n']).is_empty())
            ),
            LineClass::Invalid => {}
        }
    }
}

/// The config loader: any text is a config or an error naming the problem, never a
/// panic; a loaded config keeps its documented invariants; and neither an error nor the
/// rendered config ever shows the API key or the control-plane URL given in the text.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // a config file is text: the loader takes `&str`
    };
    let loaded = Config::from_toml_str(text);
    if let Ok(config) = &loaded {
        assert_config_invariants(config);
    }
    let parsed: Option<toml::Table> = text.parse().ok();
    let field = |key: &str| -> Option<String> {
        let value = parsed.as_ref()?.get("control_plane")?.get(key)?.as_str()?;
        // Only a value that stands once in the text can be swapped for a stand-in below.
        (value.chars().count() >= 6 && text.matches(value).count() == 1).then(|| value.to_owned())
    };
    // The API key is shown nowhere; the URL may be shown in the loaded config, not in errors.
    let shown = |loaded: &Result<Config, crate::config::ConfigError>, secret: bool| match loaded {
        Ok(config) if secret => format!("{}\n{config:?}", config.masked()),
        Ok(_) => String::new(),
        Err(error) => error.to_string(),
    };
    for (key, secret) in [("api_key", true), ("base_url", false)] {
        let Some(value) = field(key) else {
            continue;
        };
        if secret && (value.starts_with("env:") || value.starts_with("file:")) {
            continue; // a reference, not the secret itself
        }
        let output = shown(&loaded, secret);
        if !output.contains(value.as_str()) {
            continue;
        }
        // The value may also be a word of the message: it is echoed only if a stand-in put
        // in its place is shown too.
        let stand_in = "\u{2603}".repeat(value.chars().count());
        let other = Config::from_toml_str(&text.replacen(value.as_str(), &stand_in, 1));
        assert!(
            !shown(&other, secret).contains(&stand_in),
            "control_plane.{key} was echoed: {output}"
        );
    }
}

fn assert_config_invariants(config: &Config) {
    let cp = &config.control_plane;
    if config.strict.enabled {
        assert_eq!(config.mcp.max_concurrent.get(), 1, "strict with concurrency above one");
    }
    assert!(
        (1..=32).contains(&config.mcp.channels.len()),
        "{} channels",
        config.mcp.channels.len()
    );
    for (name, channel) in &config.mcp.channels {
        assert!(
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "channel name {name:?}"
        );
        match channel {
            ChannelConfig::Http { url, .. } => assert!(url.starts_with("http://") || url.starts_with("https://")),
            ChannelConfig::Stdio { command, .. } => assert!(!command.is_empty(), "an empty stdio command"),
        }
    }
    assert!(
        !cp.tunnel_id.is_empty() && !cp.tunnel_id.contains(|c: char| c.is_whitespace() || "/?#%".contains(c)),
        "tunnel id {:?}",
        cp.tunnel_id
    );
    assert!(cp.base_url.starts_with("http://") || cp.base_url.starts_with("https://"));
    assert!(!cp.base_url.ends_with('/'), "base url with a trailing slash");
    assert!(cp.url_path.is_empty() || (cp.url_path.starts_with('/') && !cp.url_path.ends_with('/')));
    for (what, d) in [
        ("poll_timeout", cp.poll_timeout),
        ("post_timeout", cp.post_timeout),
        ("request_timeout", config.mcp.request_timeout),
        ("connect_timeout", config.mcp.connect_timeout),
    ] {
        assert!(d > Duration::ZERO, "{what} is zero");
    }
    assert!(
        config.ops.allow_remote || config.ops.listen.ip().is_loopback(),
        "a remote ops listener"
    );
    assert!(!config.telemetry.log_level.is_empty());
}

#[cfg(test)]
mod tests;
