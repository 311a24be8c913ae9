#![no_main]
//! Fuzz target: see `brisk::fuzzing::websocket_frames`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| brisk::fuzzing::websocket_frames(data));
