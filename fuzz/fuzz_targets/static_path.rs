#![no_main]
//! Fuzz target: see `brisk::fuzzing::static_path`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::static_path(data));
