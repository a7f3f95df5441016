#![no_main]
// The target's body and its properties: tunnelgate::fuzzing::config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::fuzzing::config(data));
