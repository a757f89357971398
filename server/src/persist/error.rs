//! [`PersistError`]: why the data dir, or a file in it, cannot be used (not writable, locked by
//! another server, from an incompatible version, damaged). The layers above convert it once:
//! the server's error reports it as a data dir error, the local IoT Hub's as its own.

use std::sync::Arc;

/// Why the data dir cannot be used: a message naming the file and what was wrong (the text
/// `mqstate serve` prints and the tests read), and the error that said so, when there is one
/// (an I/O or redb error), as [`std::error::Error::source`]. Nothing in the directory was
/// changed.
#[derive(Debug, Clone)]
pub struct PersistError {
    message: String,
    // An `Arc` so that the hub's error, which is cloned to every waiter of a commit, can
    // carry it.
    cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PersistError {
    /// An error explained by `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        PersistError {
            message: message.into(),
            cause: None,
        }
    }

    /// An error described by `message`, because of `cause` (kept as its source).
    pub fn caused(
        message: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        PersistError {
            message: message.into(),
            cause: Some(Arc::from(cause.into())),
        }
    }

    /// The message, naming the file and what was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for PersistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PersistError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// Two errors are equal when they say the same (their causes are not comparable).
impl PartialEq for PersistError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for PersistError {}
