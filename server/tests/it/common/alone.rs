//! A test that measures its own process (its resident memory) or sets what is process-wide
//! (the tracing subscriber) cannot share the process with the other tests of this binary:
//! their allocations would count as its own, or its subscriber would log (and slow) theirs.
//! Such a test runs its body in a process of this binary started for it alone:
//! `run_alone!(test_name)` first in its body.

use std::process::Command;

/// Set in the process started for one test: there the test runs its body.
const ALONE: &str = "MQSTATE_IT_ALONE";

/// Called first in the test whose path in this binary is `name`
/// (`concat!(module_path!(), "::test_name")`): outside its own process, runs the test alone in
/// a new process of this binary, checks that it passed there and returns `true` (the caller
/// returns); in that process returns `false` and the caller runs the body.
pub fn in_own_process(name: &str) -> bool {
    if is_alone() {
        return false;
    }
    // `module_path!()` starts with the crate's name, which test names leave out.
    let name = name.split_once("::").map_or(name, |(_, test)| test);
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Through the harness's capture: shown when this test fails, or with `--nocapture`.
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{name} failed in its own process");
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run in its own process"
    );
    true
}

/// Whether this process was started for one test.
pub fn is_alone() -> bool {
    std::env::var_os(ALONE).is_some()
}

/// First in a test that must run alone (see above): in a process of its own, it goes on; in
/// the binary's process, it runs the test in a new process and returns.
#[macro_export]
macro_rules! run_alone {
    ($test:ident) => {
        if $crate::common::alone::in_own_process(concat!(module_path!(), "::", stringify!($test))) {
            return;
        }
    };
}
