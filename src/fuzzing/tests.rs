//! The fuzz targets as property tests: every committed corpus and regression input, then a
//! bounded number of proptest mutations of them per target
//! (`TUNNELGATE_FUZZ_CASES`, default 256), and the decoders' size caps on oversized input.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use super::*;

/// `fuzz/corpus/<target>` and `fuzz/regressions/<target>`, committed with the repository.
fn committed_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for entry in dir {
            let path = entry.expect("a readable directory").path();
            if path.is_file() {
                let bytes = std::fs::read(&path).expect("a readable input");
                inputs.push((path, bytes));
            }
        }
    }
    inputs.sort();
    inputs
}

#[test]
fn every_committed_corpus_and_regression_input_passes_its_target() {
    for (name, target) in TARGETS {
        let inputs = committed_inputs(name);
        assert!(inputs.len() >= 3, "{name}: the committed corpus is missing");
        for (path, bytes) in inputs {
            let outcome = std::panic::catch_unwind(|| target(&bytes));
            assert!(outcome.is_ok(), "{name} failed on {}", path.display());
        }
    }
}

/// One edit a fuzzer would make.
#[derive(Clone, Debug)]
enum Edit {
    Flip {
        at: usize,
        bit: u8,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        len: usize,
    },
    /// Copies a stretch of the input elsewhere (repeats a field, a line, a bracket).
    Repeat {
        from: usize,
        len: usize,
        to: usize,
    },
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    let interesting = prop::sample::select(vec![
        b"\n".to_vec(),
        b"\r".to_vec(),
        b"\r\n".to_vec(),
        b":".to_vec(),
        b"\"".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b"[".to_vec(),
        b"]".to_vec(),
        b",".to_vec(),
        b"=".to_vec(),
        b"\\".to_vec(),
        b"\0".to_vec(),
        vec![0xEF, 0xBB, 0xBF],
        vec![0xFF],
        b"data: ".to_vec(),
        b"18446744073709551616".to_vec(),
        b"ms".to_vec(),
        b"h".to_vec(),
        b"\"jsonrpc\"".to_vec(),
        b"[mcp.channels.x]".to_vec(),
        b"strict.enabled = true".to_vec(),
    ]);
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (
            any::<usize>(),
            prop_oneof![interesting, prop::collection::vec(any::<u8>(), 1..8)]
        )
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        (any::<usize>(), 1usize..16).prop_map(|(at, len)| Edit::Remove { at, len }),
        (any::<usize>(), 1usize..64, any::<usize>()).prop_map(|(from, len, to)| Edit::Repeat { from, len, to }),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let n = bytes.len();
        match edit {
            Edit::Flip { at, bit } if n > 0 => bytes[at % n] ^= 1 << bit,
            Edit::Flip { .. } => {}
            Edit::Insert { at, bytes: new } => {
                let at = at % (n + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Edit::Remove { at, len } if n > 0 => {
                let at = at % n;
                bytes.drain(at..(at + len).min(n));
            }
            Edit::Remove { .. } => {}
            Edit::Repeat { from, len, to } if n > 0 => {
                let from = from % n;
                let stretch = bytes[from..(from + len).min(n)].to_vec();
                let to = to % (n + 1);
                bytes.splice(to..to, stretch);
            }
            Edit::Repeat { .. } => {}
        }
    }
    bytes
}

fn cases() -> u32 {
    std::env::var("TUNNELGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Runs `target` on mutations of its committed inputs (and of nothing), as a fuzzer would
/// start from the corpus.
fn mutate_and_run(name: &str, target: Target) {
    let mut seeds: Vec<Vec<u8>> = committed_inputs(name).into_iter().map(|(_, b)| b).collect();
    seeds.push(Vec::new());
    let strategy = (
        prop::sample::select(seeds),
        prop::collection::vec(edit_strategy(), 0..6),
    )
        .prop_map(|(seed, edits)| apply(seed, &edits));
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |input| {
        std::panic::catch_unwind(|| target(&input))
            .map_err(|_| TestCaseError::fail(format!("{name} panicked on {input:?}")))
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

#[test]
fn the_poll_envelope_decoder_keeps_its_contract_on_mutated_polls() {
    mutate_and_run("poll_envelope", poll_envelope);
}

#[test]
fn the_sse_parser_keeps_its_contract_on_mutated_streams() {
    mutate_and_run("sse_stream", sse_stream);
}

#[test]
fn the_response_timeout_grammar_keeps_its_contract_on_mutated_values() {
    mutate_and_run("response_timeout", response_timeout);
}

#[test]
fn the_stdio_line_reader_keeps_its_contract_on_mutated_output() {
    mutate_and_run("stdio_lines", stdio_lines);
}

#[test]
fn the_config_loader_keeps_its_contract_on_mutated_files() {
    mutate_and_run("config", config);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_break_a_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for (_, target) in TARGETS {
            target(&bytes);
        }
    }

    #[test]
    fn grammar_values_and_near_misses_parse_exactly(
        digits in "[0-9]{1,24}",
        unit in prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "", "sec", "M", " s"]),
    ) {
        response_timeout(format!("{digits}{unit}").as_bytes());
    }
}

#[test]
fn an_oversized_stdio_line_is_held_only_up_to_its_bound() {
    let bound = 1024;
    let mut output = vec![b'x'; 1 << 20];
    output.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
    for keep_prefix in [false, true] {
        let lines = line_probe::read_all(&output, bound, keep_prefix, 64 * 1024);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].overflow);
        assert_eq!(lines[0].len, 1 << 20, "the full length is still counted");
        assert_eq!(lines[0].bytes.len(), if keep_prefix { bound } else { 0 });
        assert!(
            matches!(lines[1].class, LineClass::Response { .. }),
            "the next line is read whole"
        );
    }
}

#[test]
fn an_sse_event_that_never_ends_is_all_accounted_for_so_the_transport_bound_trips() {
    // The transport aborts a stream once `buffered()` passes its body bound: every byte the
    // parser holds for an unfinished event must be counted there, or the bound leaks.
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let chunk = vec![b'a'; 16 * 1024];
    parser.feed(b"data: ", &mut events);
    let mut fed = 0;
    for _ in 0..256 {
        parser.feed(&chunk, &mut events);
        fed += chunk.len();
        assert_eq!(parser.buffered(), "data: ".len() + fed, "an uncounted byte");
    }
    parser.feed(b"\n", &mut events);
    for _ in 0..64 {
        parser.feed(b"data: more\n", &mut events);
    }
    assert!(events.is_empty(), "no blank line, no event");
    assert_eq!(parser.buffered(), fed + 1 + 64 * "more\n".len());
}

#[test]
fn the_seed_corpora_reach_the_decoders_success_paths() {
    // Seeds that only ever fail would leave a target's success-side properties unexercised.
    let loads = committed_inputs("config")
        .iter()
        .filter(|(_, b)| Config::from_toml_str(std::str::from_utf8(b).unwrap()).is_ok())
        .count();
    assert!(loads >= 1, "no config seed loads");
    let decodes = committed_inputs("poll_envelope")
        .iter()
        .filter(|(_, b)| decode_poll(b).is_ok_and(|c| c.iter().any(Result::is_ok)))
        .count();
    assert!(decodes >= 2, "too few poll seeds decode a command");
    let within = committed_inputs("response_timeout")
        .iter()
        .filter(|(_, b)| {
            matches!(
                ResponseTimeout::parse(std::str::from_utf8(b).unwrap()),
                ResponseTimeout::Within(_)
            )
        })
        .count();
    assert!(within >= 5);
}
