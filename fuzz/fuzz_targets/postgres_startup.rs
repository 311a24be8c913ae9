#![no_main]
//! Fuzz target: see `brisk::fuzzing::postgres_startup`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::postgres_startup(data));
