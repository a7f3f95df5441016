#![no_main]
// The target's body and its properties: tunnelgate::fuzzing::response_timeout.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::fuzzing::response_timeout(data));
