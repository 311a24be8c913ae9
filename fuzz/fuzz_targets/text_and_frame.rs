#![no_main]
//! Fuzz target: see `brisk::fuzzing::text_and_frame`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::text_and_frame(data));
