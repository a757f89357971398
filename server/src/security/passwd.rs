//! The password file: `user:hash` lines, the hash a salted argon2id PHC string (the format
//! the `mqtt5` broker's password provider reads).

use std::path::Path;

use mqtt5::broker::PasswordAuthProvider;

use crate::error::ServerError;

/// A salted argon2id hash of `password` (PHC string format).
///
/// ```
/// let h = mqstate_server::security::hash_password("s3cret").unwrap();
/// assert!(h.starts_with("$argon2"));
/// ```
pub fn hash_password(password: &str) -> Result<String, ServerError> {
    PasswordAuthProvider::hash_password(password)
        .map_err(|e| ServerError::Config(format!("cannot hash the password: {e}")))
}

/// Adds `user` to the password file at `path` (created if missing), or replaces its entry.
/// Other lines are kept as they are.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("passwd");
/// mqstate_server::security::set_password(&file, "alice", "s3cret").unwrap();
/// let text = std::fs::read_to_string(&file).unwrap();
/// assert!(text.starts_with("alice:$argon2"));
/// ```
pub fn set_password(path: &Path, user: &str, password: &str) -> Result<(), ServerError> {
    if user.is_empty() || user.contains(':') || user.chars().any(char::is_whitespace) {
        return Err(ServerError::Config(format!(
            "user name {user:?}: must be non-empty, without ':' or spaces"
        )));
    }
    if password.is_empty() {
        return Err(ServerError::Config("the password is empty".into()));
    }
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ServerError::io(format!("reading {}", path.display()), e)),
    };
    let entry = format!("{user}:{}", hash_password(password)?);
    let mut lines: Vec<String> = Vec::new();
    let mut replaced = false;
    for line in existing.lines() {
        if line.split_once(':').is_some_and(|(u, _)| u.trim() == user) {
            if !replaced {
                lines.push(entry.clone());
                replaced = true;
            }
        } else {
            lines.push(line.to_owned());
        }
    }
    if !replaced {
        lines.push(entry);
    }
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text)
        .map_err(|e| ServerError::io(format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_added_and_replaced_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, "# comment\nbob:x\n").unwrap();
        set_password(&file, "alice", "one").unwrap();
        set_password(&file, "alice", "two").unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.starts_with("# comment\nbob:x\nalice:"), "{text}");
        let hash = text.lines().last().unwrap().split_once(':').unwrap().1;
        assert!(PasswordAuthProvider::verify_password("two", hash));
        assert!(!PasswordAuthProvider::verify_password("one", hash));
    }

    #[test]
    fn bad_user_names_and_empty_passwords_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        for user in ["", "a:b", "a b"] {
            assert!(set_password(&file, user, "p").is_err(), "{user:?}");
        }
        assert!(set_password(&file, "a", "").is_err());
        assert!(!file.exists());
    }
}
