#![no_main]
// The target's body and its properties: tunnelgate::fuzzing::poll_envelope.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::fuzzing::poll_envelope(data));
