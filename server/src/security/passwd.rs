//! The password file: `user:hash` lines, the hash a salted argon2id PHC string (the format
//! the `mqtt5` broker's password provider reads).

use std::path::Path;

use mqtt5::broker::PasswordAuthProvider;

use super::error::SecurityError;

/// A salted argon2id hash of `password` (PHC string format).
pub(crate) fn hash_password(password: &str) -> Result<String, SecurityError> {
    PasswordAuthProvider::hash_password(password)
        .map_err(|e| SecurityError::config_caused("cannot hash the password", e))
}

/// Adds `user` to the password file at `path` (created if missing, readable and writable by
/// its owner only: mode 0600), or replaces its entry. Other lines, and the mode of an
/// existing file, are kept as they are.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("passwd");
/// mqstate_server::security::set_password(&file, "alice", "s3cret").unwrap();
/// let text = std::fs::read_to_string(&file).unwrap();
/// assert!(text.starts_with("alice:$argon2"));
/// ```
pub fn set_password(path: &Path, user: &str, password: &str) -> Result<(), SecurityError> {
    if user.is_empty() || user.contains(':') || user.chars().any(char::is_whitespace) {
        return Err(SecurityError::config(format!(
            "user name {user:?}: must be non-empty, without ':' or spaces"
        )));
    }
    if password.is_empty() {
        return Err(SecurityError::config("the password is empty"));
    }
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(SecurityError::io(format!("reading {}", path.display()), e)),
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
    write_private_file(path, text.as_bytes())
        .map_err(|e| SecurityError::io(format!("writing {}", path.display()), e))
}

/// Writes `contents` to `path`; a file it creates is readable by its owner only (0600), an
/// existing one keeps its mode.
pub(crate) fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents)
}

/// A warning for a secrets file (password hashes, SAT tokens, policy keys) or a directory of
/// them (the data dir) that others than its owner may read or write, or `None` when it is
/// private (or the platform has no such modes).
pub(crate) fn loose_permissions(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path).ok()?;
        let mode = metadata.permissions().mode() & 0o777;
        // A directory needs its owner's x bit to be used at all.
        let private = if metadata.is_dir() { "700" } else { "600" };
        is_loose(mode).then(|| {
            format!(
                "{} has mode {mode:03o}: users other than its owner can read or change it (run `chmod {private} {}`)",
                path.display(),
                path.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The rule of [`loose_permissions`]: whether a mode gives users other than the owner any
/// right (group or others).
#[cfg(unix)]
pub(crate) fn is_loose(mode: u32) -> bool {
    mode & 0o077 != 0
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

    #[cfg(unix)]
    #[test]
    fn a_new_password_file_is_private_and_an_existing_one_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        set_password(&file, "alice", "one").unwrap();
        let mode = |f: &Path| std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert!(loose_permissions(&file).is_none());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        set_password(&file, "bob", "two").unwrap();
        assert_eq!(mode(&file), 0o640);
        let warning = loose_permissions(&file).unwrap();
        assert!(warning.contains("mode 640"), "{warning}");
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

    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn hashes_are_argon2id() {
        let h = crate::security::hash_password("s3cret").unwrap();
        assert!(h.starts_with("$argon2"));
    }

    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn loose_files_and_directories_are_named() {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("passwd");
            std::fs::write(&file, "").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(crate::security::loose_permissions(&file).is_some());
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert!(crate::security::loose_permissions(&file).is_none());
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let warning = crate::security::loose_permissions(dir.path()).unwrap();
            assert!(
                warning.contains("mode 755") && warning.contains("chmod 700"),
                "{warning}"
            );
        }
    }
}
