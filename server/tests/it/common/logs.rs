//! The log of this test binary, for tests that check what the server logs.
//!
//! A tracing subscriber is process-wide and can be set once: with every test file in one
//! binary, two tests installing their own (as `reconnect` and `iothub_rest` did when each was
//! a binary) would leave the second reading an empty log. So there is one, installed by the
//! first test that calls [`capture`]; from then on it receives the lines of every test of the
//! binary, and a test picks its own out by something only it logs (a client id, a marker).

use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// Everything logged since [`capture`] was first called.
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

/// Installs the binary's subscriber (info level, no colours: what `mqstate serve` writes),
/// once; later calls do nothing.
pub fn capture() {
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
