//! The log, for tests that check what the server logs.
//!
//! A tracing subscriber is process-wide and can be set once. In the binary's process it would
//! take the lines of every test running beside it, and slow them (a test comparing GET
//! latencies before and during a flood of refused SUBSCRIBEs failed when the flooder's
//! warnings went through it); two tests installing their own would leave the second reading
//! an empty log. So a test that reads the log runs alone (`run_alone!`) and installs it there.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// Everything logged since [`capture`] was called.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Keeps the lines in [`LOG`] and prints them through `eprint!`, which the test harness
/// captures per test (shown for a failed test, or with `--nocapture`).
struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        eprint!("{}", String::from_utf8_lossy(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the process's subscriber (info level, no colours: what `mqstate serve` writes),
/// in a process started for one test.
pub fn capture() {
    assert!(
        super::alone::is_alone(),
        "a test that captures the log runs alone (run_alone!)"
    );
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(|| Capture)
        .try_init();
}

/// The lines logged so far that contain `marker`.
pub fn lines_with(marker: &str) -> Vec<String> {
    let log = LOG.lock().unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(marker))
        .map(str::to_owned)
        .collect()
}
