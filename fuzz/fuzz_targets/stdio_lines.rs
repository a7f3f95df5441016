#![no_main]
// The target's body and its properties: tunnelgate::internals::fuzzing::stdio_lines.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::internals::fuzzing::stdio_lines(data));
