//! The routing correction (wire 2026-08-25, `wrong-cluster-v1`, opt-in with
//! `control_plane.routing_correction`): a poll answered `409 wrong_cluster` with an
//! `X-Tunnel-Shard-Token` teaches a placement token that later polls send, as the
//! official client does.
//!
//! Invariants:
//! - a correction is read only from a poll's `409` whose body is one JSON object whose
//!   `error.code` is `wrong_cluster` and whose `error.policy_revision` is a bare integer
//!   of at most 16 digits (0 to 2^53 − 1), with one `X-Tunnel-Shard-Token` of 1 to 4096
//!   bytes of `0x21`-`0x7e` and no comma (and an `error.shard_token`, when present, equal
//!   to it); a duplicated `error`, `code`, `policy_revision` or `shard_token` makes it
//!   invalid; anything invalid changes nothing;
//! - the state is this process's only: a first or higher revision replaces the token and
//!   its watermark, the same revision with the same token changes nothing, with another
//!   token clears it, a lower one is ignored;
//! - a `200` or `204` keeps the token and resets both counters; three corrections without
//!   a success clear it, and so do three failures (transport, `408`, `5xx`) while one is
//!   held; `401`/`403`, `429`, other `4xx` and invalid corrections never count;
//! - every change is made against the generation the poll started with, and dropped if
//!   the state moved since;
//! - the token goes on polls only, and is never logged.

use std::sync::Mutex;

use serde_json::value::RawValue;

/// A valid correction: the placement token and the policy revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Correction {
    pub(super) token: String,
    pub(super) revision: u64,
}

/// The largest `policy_revision` (2^53 − 1).
const MAX_REVISION: u64 = 9_007_199_254_740_991;
/// Corrections, or failures while a token is held, that clear it.
const STRIKES: u8 = 3;

/// A poll's `409` as a correction, if it is a valid one. `tokens` are the values of its
/// `X-Tunnel-Shard-Token` headers, `body` its body (at most 64 KiB read).
pub(super) fn correction(tokens: &[&[u8]], body: &[u8]) -> Option<Correction> {
    let [token] = tokens else { return None };
    let valid_token =
        (1..=4096).contains(&token.len()) && token.iter().all(|b| (0x21..=0x7e).contains(b) && *b != b',');
    if !valid_token {
        return None;
    }
    let token = std::str::from_utf8(token).ok()?.to_owned();
    let outer = unique_object(std::str::from_utf8(body).ok()?)?;
    let error = unique_object(outer.get("error")?.get())?;
    if error.get("code")?.get() != r#""wrong_cluster""# {
        return None;
    }
    let revision = error.get("policy_revision")?.get();
    if revision.is_empty() || revision.len() > 16 || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let revision = revision.parse::<u64>().ok().filter(|r| *r <= MAX_REVISION)?;
    if let Some(echo) = error.get("shard_token") {
        if serde_json::from_str::<String>(echo.get()).ok()? != token {
            return None;
        }
    }
    Some(Correction { token, revision })
}

/// A JSON object's members as raw values, `None` when it is not one object or repeats a
/// member.
fn unique_object(text: &str) -> Option<std::collections::BTreeMap<String, &RawValue>> {
    let members: Vec<(String, &RawValue)> = serde_json::from_str::<Members<'_>>(text).ok()?.0;
    let mut out = std::collections::BTreeMap::new();
    for (name, value) in members {
        if out.insert(name, value).is_some() {
            return None;
        }
    }
    Some(out)
}

/// Every member of an object, in order, duplicates kept.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((name, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// How a poll ended, for the token's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PollEnd {
    /// `200` or `204`.
    Success,
    /// A transport failure, `408` or a `5xx`.
    Failure,
    /// Anything else that does not count (`401`/`403`, `429`, other `4xx`, an invalid
    /// correction).
    Neutral,
}

#[derive(Debug, Default)]
struct State {
    token: Option<String>,
    watermark: Option<u64>,
    corrections: u8,
    failures: u8,
    generation: u64,
}

/// The placement token of this process, and its counters.
#[derive(Debug, Default)]
pub(super) struct Routing {
    state: Mutex<State>,
}

impl Routing {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The generation a poll starts with, and the token it sends.
    pub(super) fn snapshot(&self) -> (u64, Option<String>) {
        let state = self.lock();
        (state.generation, state.token.clone())
    }

    /// A poll started at `generation` ended as `end`.
    pub(super) fn ended(&self, generation: u64, end: PollEnd) {
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        match end {
            PollEnd::Success => {
                state.corrections = 0;
                state.failures = 0;
            }
            PollEnd::Failure if state.token.is_some() => {
                state.failures += 1;
                if state.failures >= STRIKES {
                    clear(&mut state);
                }
            }
            PollEnd::Failure | PollEnd::Neutral => {}
        }
    }

    /// A poll started at `generation` was corrected with `correction`.
    pub(super) fn corrected(&self, generation: u64, correction: Correction) {
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        state.corrections += 1;
        if state.corrections >= STRIKES {
            clear(&mut state);
            return;
        }
        match state.watermark {
            Some(mark) if correction.revision < mark => {}
            Some(mark) if correction.revision == mark => {
                if state.token.as_deref() != Some(correction.token.as_str()) && state.token.is_some() {
                    state.token = None;
                    state.generation += 1;
                } else if state.token.is_none() {
                    state.token = Some(correction.token);
                    state.generation += 1;
                }
            }
            _ => {
                state.token = Some(correction.token);
                state.watermark = Some(correction.revision);
                state.generation += 1;
            }
        }
    }
}

/// Drops the token (the watermark is kept: a lower revision still teaches nothing).
fn clear(state: &mut State) {
    state.token = None;
    state.corrections = 0;
    state.failures = 0;
    state.generation += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(error: &str) -> Vec<u8> {
        format!(r#"{{"error":{error}}}"#).into_bytes()
    }

    #[test]
    fn only_a_correction_in_its_exact_shape_is_read() {
        let ok = body(r#"{"code":"wrong_cluster","policy_revision":42}"#);
        assert_eq!(
            correction(&[b"tok-1"], &ok),
            Some(Correction {
                token: "tok-1".into(),
                revision: 42
            })
        );
        let echoed = body(r#"{"code":"wrong_cluster","policy_revision":7,"shard_token":"tok-1","other":[1]}"#);
        assert!(correction(&[b"tok-1"], &echoed).is_some());
        for (tokens, bad) in [
            (vec![&b"tok"[..], &b"tok"[..]], ok.clone()),
            (vec![&b""[..]], ok.clone()),
            (vec![&b"a,b"[..]], ok.clone()),
            (vec![&b"sp ace"[..]], ok.clone()),
            (vec![&b"tok"[..]], body(r#"{"code":"other","policy_revision":1}"#)),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":"1"}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":-1}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":1.5}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":1e3}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":null}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":12345678901234567}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":9007199254740992}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","code":"wrong_cluster","policy_revision":1}"#),
            ),
            (
                vec![&b"tok"[..]],
                body(r#"{"code":"wrong_cluster","policy_revision":1,"shard_token":"x"}"#),
            ),
            (vec![&b"tok"[..]], b"[1]".to_vec()),
            (
                vec![&b"tok"[..]],
                br#"{"error":{"code":"wrong_cluster","policy_revision":1},"error":{}}"#.to_vec(),
            ),
        ] {
            assert_eq!(correction(&tokens, &bad), None, "{}", String::from_utf8_lossy(&bad));
        }
    }

    fn taught(routing: &Routing, token: &str, revision: u64) {
        let (generation, _) = routing.snapshot();
        routing.corrected(
            generation,
            Correction {
                token: token.into(),
                revision,
            },
        );
    }

    #[test]
    fn revisions_replace_restore_or_clear_the_token_as_the_rule_says() {
        let routing = Routing::default();
        taught(&routing, "a", 5);
        assert_eq!(routing.snapshot().1.as_deref(), Some("a"));
        taught(&routing, "b", 4);
        assert_eq!(
            routing.snapshot().1.as_deref(),
            Some("a"),
            "a lower revision is ignored"
        );
        routing.ended(routing.snapshot().0, PollEnd::Success);
        taught(&routing, "b", 5);
        assert_eq!(
            routing.snapshot().1,
            None,
            "another token at the same revision clears it"
        );
        taught(&routing, "a", 5);
        assert_eq!(
            routing.snapshot().1.as_deref(),
            Some("a"),
            "the same revision may restore one"
        );
        routing.ended(routing.snapshot().0, PollEnd::Success);
        taught(&routing, "c", 6);
        assert_eq!(
            routing.snapshot().1.as_deref(),
            Some("c"),
            "a higher revision replaces it"
        );
    }

    #[test]
    fn three_strikes_clear_the_token_and_a_success_resets_them() {
        let routing = Routing::default();
        taught(&routing, "a", 1);
        for _ in 0..2 {
            routing.ended(routing.snapshot().0, PollEnd::Failure);
        }
        routing.ended(routing.snapshot().0, PollEnd::Success);
        for _ in 0..2 {
            routing.ended(routing.snapshot().0, PollEnd::Failure);
        }
        routing.ended(routing.snapshot().0, PollEnd::Neutral);
        assert_eq!(
            routing.snapshot().1.as_deref(),
            Some("a"),
            "two failures and neutral ones do not clear"
        );
        routing.ended(routing.snapshot().0, PollEnd::Failure);
        assert_eq!(routing.snapshot().1, None, "the third failure does");
        let stale = routing.snapshot().0;
        taught(&routing, "b", 2);
        routing.ended(stale, PollEnd::Failure);
        assert_eq!(
            routing.snapshot().1.as_deref(),
            Some("b"),
            "a stale generation changes nothing"
        );
    }
}
