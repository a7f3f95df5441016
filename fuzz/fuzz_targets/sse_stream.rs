#![no_main]
// The target's body and its properties: tunnelgate::fuzzing::sse_stream.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::fuzzing::sse_stream(data));
