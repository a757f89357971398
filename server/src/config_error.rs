//! [`ConfigError`]: a setting the server cannot use. Every layer that checks settings (the
//! broker's TLS files, security's bind rules and rule files, the store's reconnection
//! bounds, the web token file) returns it inside its own error, and [`crate::ServerError`]
//! shows it as `invalid configuration: ...`. A leaf module, so that the layers need not
//! import the server's top-level error to build one.

/// An invalid setting: what was wrong (or what was being read), and the error that said so
/// when there is one (a TLS file the TLS library rejected, a rule file's parse error...).
/// Displayed as `context: cause`.
///
/// ```
/// use std::error::Error as _;
/// use mqstate_server::ConfigError;
///
/// let e = ConfigError::caused("rule file a.acl", "line 3: no topic");
/// assert_eq!(e.to_string(), "rule file a.acl: line 3: no topic");
/// assert_eq!(e.source().unwrap().to_string(), "line 3: no topic");
/// assert!(ConfigError::new("the password is empty").source().is_none());
/// ```
#[derive(Debug)]
pub struct ConfigError {
    context: String,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    /// An invalid setting, explained by `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            context: message.into(),
            cause: None,
        }
    }

    /// An invalid setting found while doing `context`, because of `cause`.
    pub fn caused(
        context: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ConfigError {
            context: context.into(),
            cause: Some(cause.into()),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            Some(cause) => write!(f, "{}: {cause}", self.context),
            None => f.write_str(&self.context),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}
