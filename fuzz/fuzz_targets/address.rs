#![no_main]
//! Fuzz target: see `brisk::fuzzing::address`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::address(data));
