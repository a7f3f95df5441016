//! The `response_timeout` grammar: `1*DIGIT ("ns" / "us" / "ms" / "s" / "m" / "h")`.

use std::time::Duration;

/// A command's lifecycle budget, anchored at poll receipt.
///
/// Absent, `null` or malformed values fail open (`Unbounded`), as the contract says.
/// `0s` is a valid, already expired budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseTimeout {
    Unbounded,
    Within(Duration),
}

impl ResponseTimeout {
    /// Parses the JSON value of the `response_timeout` field (absent = `None`).
    pub fn from_json(value: Option<&serde_json::Value>) -> Self {
        match value {
            Some(serde_json::Value::String(s)) => Self::parse(s),
            _ => Self::Unbounded,
        }
    }

    /// Parses the string form; anything outside the grammar is `Unbounded`.
    pub fn parse(s: &str) -> Self {
        let digits_end = s.bytes().take_while(u8::is_ascii_digit).count();
        if digits_end == 0 {
            return Self::Unbounded;
        }
        let (digits, unit) = s.split_at(digits_end);
        let Ok(n) = digits.parse::<u64>() else {
            // More digits than u64 holds: larger than any real budget, so no deadline.
            return Self::Unbounded;
        };
        let duration = match unit {
            "ns" => Some(Duration::from_nanos(n)),
            "us" => Some(Duration::from_micros(n)),
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3600).map(Duration::from_secs),
            _ => return Self::Unbounded,
        };
        duration.map_or(Self::Unbounded, Self::Within)
    }

    /// The budget, if any.
    pub fn budget(self) -> Option<Duration> {
        match self {
            Self::Unbounded => None,
            Self::Within(d) => Some(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_unit_of_the_grammar_parses() {
        let cases = [
            ("5ns", Duration::from_nanos(5)),
            ("5us", Duration::from_micros(5)),
            ("4500ms", Duration::from_millis(4500)),
            ("30s", Duration::from_secs(30)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
            ("007s", Duration::from_secs(7)),
        ];
        for (input, want) in cases {
            assert_eq!(ResponseTimeout::parse(input), ResponseTimeout::Within(want), "{input}");
        }
    }

    #[test]
    fn malformed_values_fail_open() {
        for input in [
            "", "s", "30", "30 s", " 30s", "30S", "1.5s", "-1s", "30sec", "1d", "+3s", "3s ", "٣s",
        ] {
            assert_eq!(ResponseTimeout::parse(input), ResponseTimeout::Unbounded, "{input:?}");
        }
    }

    #[test]
    fn json_values_other_than_strings_fail_open() {
        use serde_json::json;
        assert_eq!(ResponseTimeout::from_json(None), ResponseTimeout::Unbounded);
        assert_eq!(
            ResponseTimeout::from_json(Some(&json!(null))),
            ResponseTimeout::Unbounded
        );
        assert_eq!(ResponseTimeout::from_json(Some(&json!(30))), ResponseTimeout::Unbounded);
        assert_eq!(
            ResponseTimeout::from_json(Some(&json!("1s"))),
            ResponseTimeout::Within(Duration::from_secs(1))
        );
    }

    #[test]
    fn overflowing_values_fail_open() {
        assert_eq!(
            ResponseTimeout::parse("99999999999999999999999s"),
            ResponseTimeout::Unbounded
        );
        assert_eq!(
            ResponseTimeout::parse("18446744073709551615h"),
            ResponseTimeout::Unbounded
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC*") {
            let _ = ResponseTimeout::parse(&s);
        }

        #[test]
        fn well_formed_values_round_trip(n in 0u64..1_000_000, unit in prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h"])) {
            let want = match unit {
                "ns" => Duration::from_nanos(n),
                "us" => Duration::from_micros(n),
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => Duration::from_secs(n * 60),
                _ => Duration::from_secs(n * 3600),
            };
            prop_assert_eq!(ResponseTimeout::parse(&format!("{n}{unit}")), ResponseTimeout::Within(want));
        }

        #[test]
        fn anything_matching_the_contract_pattern_parses(s in "[0-9]{1,12}(ns|us|ms|s|m|h)") {
            prop_assert!(matches!(ResponseTimeout::parse(&s), ResponseTimeout::Within(_)));
        }
    }
}
