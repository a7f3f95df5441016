//! The id rewrite (pure): where the members the gateway replaces sit in a JSON-RPC
//! message, and splicing a new value into exactly that span.
//!
//! On the pipe every request carries an id the gateway chose (unique per child) instead of
//! its caller's, and, when it has one, a gateway progress token instead of the caller's;
//! responses and progress notifications get the caller's values back, and a caller's
//! `notifications/cancelled` gets the pipe-side id of the request it cancels.
//!
//! Invariant: only the replaced value's bytes change; every other byte of the message is
//! kept (key order, whitespace, escapes, unknown members). Spans come from serde_json's
//! borrowed `RawValue`s, which are slices of the text being parsed, so a span is found
//! without re-serializing anything. Nothing here does I/O, logs or counts. The line
//! framing (`line`) finds a response's id span with [`span_in`]; this module imports
//! nothing from it.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A byte range of a JSON text holding one value.
pub(super) type Span = Range<usize>;

/// Where the members the gateway rewrites sit in an outgoing request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RequestSpans {
    /// The top-level `id` (never `null`: a message with a null id is not a request).
    pub(super) id: Span,
    /// `params._meta.progressToken`, when present and not `null`.
    pub(super) progress_token: Option<Span>,
}

/// The top-level members the rewrite looks at. Duplicate members fail the parse: the
/// gateway cannot know which of two the server would use, so it rewrites neither.
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestId")]
    request_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
}

fn is_json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Trims JSON whitespace (what may surround a value without changing it).
pub(super) fn trim_json(s: &str) -> &str {
    s.trim_matches(is_json_space)
}

/// Where `inner` (a value parsed out of `outer`, so a slice of it) sits in `outer`,
/// trimmed of JSON whitespace.
pub(super) fn span_in(outer: &str, inner: &RawValue) -> Option<Span> {
    let inner = trim_json(inner.get());
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    let found = outer.get(start..end)?;
    (found.as_ptr() == inner.as_ptr()).then_some(start..end)
}

/// Whether a JSON object text could hold a member named `key`: it must spell it out,
/// or use `\u` escapes (the only way to write a letter other than itself).
fn may_hold(json: &str, key: &str) -> bool {
    json.contains(key) || json.contains("\\u")
}

/// The members of `params` when it is an object (by-position params have none of them).
fn params_of<'a>(params: Option<&'a RawValue>) -> Result<Option<Params<'a>>, ()> {
    match params {
        Some(p) if trim_json(p.get()).starts_with('{') => serde_json::from_str(p.get()).map(Some).map_err(|_| ()),
        _ => Ok(None),
    }
}

/// The top-level members of an object text (`None` for anything else: serde would take
/// an array's elements as the members in order).
fn top(json: &str) -> Option<Top<'_>> {
    if !trim_json(json).starts_with('{') {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// Locates a request's `id` and `params._meta.progressToken`. `None` when the text is
/// not an object, has no (or a null) id, or repeats a member on the way to either.
pub(super) fn request_spans(json: &str) -> Option<RequestSpans> {
    let top = top(json)?;
    let id = span_in(json, top.id?)?;
    let mut progress_token = None;
    if may_hold(json, "progressToken") {
        let meta = match params_of(top.params).ok()?.and_then(|p| p.meta) {
            Some(m) if trim_json(m.get()).starts_with('{') => Some(serde_json::from_str::<Meta<'_>>(m.get()).ok()?),
            _ => None,
        };
        if let Some(token) = meta.and_then(|m| m.progress_token) {
            progress_token = Some(span_in(json, token)?);
        }
    }
    Some(RequestSpans { id, progress_token })
}

/// The text could not be parsed to find a member the gateway must rewrite (not an
/// object, or a repeated member on the way): it is not forwarded.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unparsable;

/// `params.requestId` of a `notifications/cancelled`: `None` when absent or `null`.
pub(super) fn cancelled_request_span(json: &str) -> Result<Option<Span>, Unparsable> {
    let top = top(json).ok_or(Unparsable)?;
    let params = params_of(top.params).map_err(|()| Unparsable)?;
    match params.and_then(|p| p.request_id) {
        Some(id) => span_in(json, id).map(Some).ok_or(Unparsable),
        None => Ok(None),
    }
}

/// `params.progressToken` of a `notifications/progress` (when present and not `null`).
pub(super) fn progress_token_span(json: &str) -> Option<Span> {
    let top = top(json)?;
    let token = params_of(top.params).ok()??.progress_token?;
    span_in(json, token)
}

/// `json` with each span replaced by its new text; everything else is copied as is.
/// Spans must not overlap (they are sorted here).
pub(super) fn splice(json: &str, edits: &mut [(Span, &str)]) -> String {
    edits.sort_by_key(|(span, _)| span.start);
    let grown: usize = edits.iter().map(|(_, with)| with.len()).sum();
    let mut out = String::with_capacity(json.len() + grown);
    let mut at = 0;
    for (span, with) in edits.iter() {
        assert!(
            span.start >= at && span.end <= json.len(),
            "rewrite spans are in bounds and do not overlap"
        );
        out.push_str(&json[at..span.start]);
        out.push_str(with);
        at = span.end;
    }
    out.push_str(&json[at..]);
    out
}

/// The unsigned integer a span holds, if it is one written plainly (the form the gateway
/// writes its own ids and tokens in).
pub(super) fn plain_u64(json: &str, span: &Span) -> Option<u64> {
    let text = json.get(span.clone())?;
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if text.len() > 1 && text.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

/// Two raw JSON ids are the same JSON-RPC id: equal as JSON values (so `"a"` and
/// `"\u0061"` match, and `1` does not match `"1"`).
pub(super) fn same_id(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
