#![no_main]
// The target's body and its properties: tunnelgate::fuzzing::stdio_lines.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::fuzzing::stdio_lines(data));
