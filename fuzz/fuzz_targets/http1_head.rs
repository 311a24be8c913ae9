#![no_main]
//! Fuzz target: see `brisk::fuzzing::http1_head`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::http1_head(data));
