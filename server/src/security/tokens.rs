//! The file of accepted K8S-SAT tokens: a local stand-in for the cluster's token review.

use std::collections::HashMap;
use std::path::Path;

use super::error::SecurityError;

/// Accepted service account tokens, each with the user name it authenticates as.
///
/// File format: one token per line, optionally followed by whitespace and a user name (the
/// default user name is `sat-{line number}`); blank lines and `#` comments are ignored.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenSet {
    users: HashMap<Vec<u8>, String>,
}

impl TokenSet {
    /// Reads the token file.
    pub(crate) fn load(path: &Path) -> Result<TokenSet, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            SecurityError::io(format!("reading the SAT file {}", path.display()), e)
        })?;
        TokenSet::parse(&text)
            .map_err(|e| SecurityError::config_caused(format!("SAT file {}", path.display()), e))
    }

    /// Parses the token file's text.
    pub(crate) fn parse(text: &str) -> Result<TokenSet, String> {
        let mut users = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(token), user, None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {}: expected `TOKEN [USER]`", n + 1));
            };
            let user = user.map_or_else(|| format!("sat-{}", n + 1), str::to_owned);
            users.insert(token.as_bytes().to_vec(), user);
        }
        if users.is_empty() {
            return Err("no tokens".into());
        }
        Ok(TokenSet { users })
    }

    /// The user name a token authenticates as, if it is accepted.
    pub(crate) fn user_of(&self, token: &[u8]) -> Option<&str> {
        // Tokens may arrive with a trailing newline when read from a file by the client.
        let token = token.trim_ascii();
        self.users.get(token).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn tokens_and_their_users() {
        use super::TokenSet;

        let t = TokenSet::parse("# tokens\neyJhbGciOi.x.y  dashboard\nabc\n").unwrap();
        assert_eq!(t.user_of(b"eyJhbGciOi.x.y"), Some("dashboard"));
        assert_eq!(t.user_of(b"abc"), Some("sat-3"));
        assert_eq!(t.user_of(b"nope"), None);
    }
}
