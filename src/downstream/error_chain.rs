//! Reading an error's cause chain: which I/O kinds it holds and what its layers say. The
//! HTTP client's errors name their stage (DNS, TCP connect, TLS) only in their text.

/// Every `io::ErrorKind` in the chain, including errors wrapped inside `io::Error`s.
pub(crate) fn io_kinds(error: &(dyn std::error::Error + 'static)) -> Vec<std::io::ErrorKind> {
    let mut kinds = Vec::new();
    let mut pending: Vec<&(dyn std::error::Error + 'static)> = vec![error];
    while let Some(err) = pending.pop() {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            kinds.push(io.kind());
            if let Some(inner) = io.get_ref() {
                pending.push(inner);
                continue;
            }
        }
        if let Some(next) = err.source() {
            pending.push(next);
        }
    }
    kinds
}

/// Whether any layer of the chain mentions one of `needles` (lowercase).
pub(crate) fn chain_mentions(error: &(dyn std::error::Error + 'static), needles: &[&str]) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = source {
        let text = err.to_string().to_ascii_lowercase();
        if needles.iter().any(|n| text.contains(n)) {
            return true;
        }
        source = err.source();
    }
    false
}
