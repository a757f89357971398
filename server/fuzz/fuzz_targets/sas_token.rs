#![no_main]
//! `checks::sas_token` on arbitrary bytes (the same check runs on stable in the tests of
//! `server/src/fuzzing/`).

use libfuzzer_sys::fuzz_target;
use mqstate_server::fuzzing;

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses one of the checks
mod checks;

fuzz_target!(|data: &[u8]| checks::sas_token(data));
