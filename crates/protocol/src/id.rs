//! Fresh identifiers the gateway mints: the `X-Client-Request-Id` of a response POST and
//! the instance id a client declares on the wire, and the same kind of token where a
//! local name must not collide (the demo's work directory, the doctor's probe file).
//!
//! The one part of `protocol` that is not a pure function: it draws from `rand`'s thread
//! RNG. It touches no socket, clock or metric.

/// `n` random bytes as lowercase hex (`2 * n` characters, `[0-9a-f]`).
pub fn random_hex(n: usize) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * n);
    for _ in 0..n {
        let byte = rand::random::<u8>();
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_gives_two_lowercase_hex_digits_per_byte() {
        for n in [0, 1, 6, 16] {
            let id = random_hex(n);
            assert_eq!(id.len(), 2 * n);
            assert!(
                id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{id}"
            );
        }
    }
}
