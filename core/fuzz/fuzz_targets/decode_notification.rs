#![no_main]
//! `checks::decode_notification` on arbitrary bytes (the same check runs on stable in
//! `core/tests/it/fuzz_decoders.rs`).

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::decode_notification(data));
