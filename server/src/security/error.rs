//! [`SecurityError`]: why the security settings cannot be used or applied (a bind address
//! they forbid, an unreadable rule, SAT or password file, no randomness for a secret).
//! `LocalServer` converts it once into [`crate::ServerError`].

use crate::config_error::ConfigError;

/// Why a security setting could not be used.
///
/// ```
/// use mqstate_server::security::{set_password, SecurityError};
///
/// let dir = std::env::temp_dir().join("mqstate-doc-security-error");
/// let err = set_password(&dir.join("passwd"), "alice", "").unwrap_err();
/// assert!(matches!(err, SecurityError::Config(_)));
/// assert_eq!(err.to_string(), "invalid configuration: the password is empty");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecurityError {
    /// A setting is refused: a bind address without TLS and authentication, a malformed
    /// rule, SAT or password file (its line and the parser's error as the cause).
    #[error("invalid configuration: {0}")]
    Config(#[source] ConfigError),
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The operating system gave no randomness for a secret.
    #[error("no randomness from the OS for {what}")]
    NoRandomness {
        /// What the secret was for.
        what: String,
    },
}

impl SecurityError {
    /// A refused setting explained by `message` alone.
    pub(crate) fn config(message: impl Into<String>) -> Self {
        SecurityError::Config(ConfigError::new(message))
    }

    /// A refused setting found while doing `context`, because of `cause`.
    pub(crate) fn config_caused(
        context: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        SecurityError::Config(ConfigError::caused(context, cause))
    }

    /// An I/O error while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SecurityError::Io {
            context: context.into(),
            source,
        }
    }
}
