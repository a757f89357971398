//! The data dir is private to the user the server runs as: it holds every persisted value,
//! every device's keys and the hub's policy keys, so the directory is created 0700 and every
//! file the server writes in it 0600, whatever the umask.
//!
//! The modes are given when a file or directory is created, so there is no moment when
//! another user could open it. A file or directory of ours that an older version created
//! with the umask's modes is tightened at start, with a warning (its contents may have been
//! read by others until now). A data dir that already existed keeps its mode: it may be a
//! directory the operator also uses for other things, so it is only warned about (with
//! [`crate::security::loose_permissions`], as password and token files are).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::PersistError;

/// The mode of the data dir and of the directories the server creates in it.
const DIR_MODE: u32 = 0o700;
/// The mode of every file the server creates in the data dir.
const FILE_MODE: u32 = 0o600;

/// The data dirs already warned about in this process: the store, the hub's file and the
/// policies file each prepare the same directory, and one warning is enough.
static WARNED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Creates the data dir `dir` (and missing parents) with mode 0700, or checks the existing
/// one: something that is not a directory is an error, a directory others can read is
/// warned about (once per process).
pub(crate) fn create_data_dir(dir: &Path) -> Result<(), PersistError> {
    let shown = dir.display();
    if dir.exists() {
        if !dir.is_dir() {
            return Err(PersistError::new(format!(
                "{shown} exists and is not a directory"
            )));
        }
        if let Some(warning) = crate::security::loose_permissions(dir) {
            let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
            if !warned.iter().any(|d| d == dir) {
                warned.push(dir.to_owned());
                tracing::warn!("data dir {warning}");
            }
        }
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder
        .create(dir)
        .map_err(|e| PersistError::caused(format!("cannot create the directory {shown}: {e}"), e))
}

/// Creates `dir`, a directory of ours inside the data dir, with mode 0700, or tightens the
/// existing one to 0700.
pub(crate) fn create_own_dir(dir: &Path) -> Result<(), PersistError> {
    let fail = |e: std::io::Error| {
        let message = format!("cannot create the directory {}: {e}", dir.display());
        PersistError::caused(message, e)
    };
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    match builder.create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {
            #[cfg(unix)]
            {
                // Opened, so that the mode is changed on what was checked (not on a path
                // that could be replaced in between).
                let opened = File::open(dir).map_err(fail)?;
                tighten(&opened, dir, DIR_MODE).map_err(fail)?;
            }
            Ok(())
        }
        Err(e) => Err(fail(e)),
    }
}

/// Opens `path`, a file of ours in the data dir, for reading and writing, creating it with
/// mode 0600. An existing file keeps its mode: see [`tighten_file`].
pub(crate) fn create_file(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options.open(path)
}

/// Tightens `opened`, the file of ours at `path`, to 0600 if users other than its owner have
/// any right on it.
pub(crate) fn tighten_file(opened: &File, path: &Path) -> std::io::Result<()> {
    tighten(opened, path, FILE_MODE)
}

/// Sets the mode of `opened` (which is `path`) to `private` (0700 or 0600) when users other
/// than its owner have any right on it, and says so. What is created here already has that
/// mode (the umask can only take rights away), so this only changes what an older version
/// left. A mode that cannot be changed (the file belongs to another user) is warned about and
/// the server still starts, as it did before.
fn tighten(opened: &File, path: &Path, private: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = opened.metadata()?.permissions().mode() & 0o777;
        if !crate::security::is_loose(mode) {
            return Ok(());
        }
        let shown = path.display();
        match opened.set_permissions(std::fs::Permissions::from_mode(private)) {
            Ok(()) => tracing::warn!(
                "{shown} had mode {mode:03o}, which let users other than its owner read it; its \
                 mode is now {private:03o} (what it holds may have been read: older versions of \
                 mqstate created the data dir's files with the umask's modes)"
            ),
            Err(e) => {
                let warning = crate::security::loose_permissions(path)
                    .unwrap_or_else(|| format!("{shown} has mode {mode:03o}"));
                tracing::warn!("{warning}; mqstate could not change it: {e}");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (opened, path, private);
    Ok(())
}
