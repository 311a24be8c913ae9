#![no_main]
//! Fuzz target: see `brisk::fuzzing::framing_guard`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::framing_guard(data));
