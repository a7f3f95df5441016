#![no_main]
// The target's body and its properties: tunnelgate::internals::fuzzing::sse_stream.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tunnelgate::internals::fuzzing::sse_stream(data));
