#![no_main]
//! Fuzz target: see `brisk::fuzzing::permessage_deflate`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::permessage_deflate(data));
