//! Helpers of the CLI's integration tests, once for every file: the processes they start
//! (`mqstate serve`, `mqstate watch`, ...), and the IoT Hub crash harness.

#![allow(dead_code)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

// Also the harness of `cli/examples/iothub_crash_test.rs` (included there by path).
pub mod iothub_crash;

/// Kills a child process on drop, so a failing test leaves nothing behind.
pub struct Reaper(pub Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends a signal to a child.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for a child's exit status.
pub fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < within, "still running after {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
