#![no_main]
// The target's body and its properties: tunnelgate::internals::fuzzing::config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::internals::fuzzing::config(data));
