//! Paths written in a config file, as shown to humans and as used.
//!
//! A relative path in a file is relative to that file's directory, never to the
//! daemon's working directory (which differs between a shell, systemd and a
//! container). Each resolved path is kept twice: as the operator would recognise it
//! (the file's path as given, joined with the value) for messages, and absolute for
//! the resolved [`Config`](super::Config).

use std::io;
use std::path::{Path, PathBuf};

/// A path from a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilePath {
    /// For messages: relative to the working directory if the config path was.
    pub display: PathBuf,
    /// For use.
    pub abs: PathBuf,
}

/// The directory of a config file, against which its relative paths resolve.
#[derive(Debug, Clone)]
pub(crate) struct BaseDir {
    display: PathBuf,
    abs: PathBuf,
}

impl FilePath {
    /// A path as given by the user (on the command line), made absolute against the
    /// working directory.
    pub fn given(path: &Path) -> io::Result<Self> {
        Ok(Self {
            display: path.to_path_buf(),
            abs: std::path::absolute(path)?,
        })
    }
}

impl BaseDir {
    /// The directory of `file`.
    pub fn of(file: &FilePath) -> Self {
        let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
        Self {
            display: parent(&file.display),
            abs: parent(&file.abs),
        }
    }

    /// Resolves `value` (absolute, or relative to this directory).
    pub fn join(&self, value: &str) -> FilePath {
        let value = Path::new(value);
        FilePath {
            display: self.display.join(value),
            abs: self.abs.join(value),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_follow_the_file_not_the_working_directory() {
        let base = BaseDir::of(&FilePath::given(Path::new("config/nodefence.toml")).expect("cwd"));
        let p = base.join("secrets/bmc-password");
        assert_eq!(p.display, Path::new("config/secrets/bmc-password"));
        assert!(p.abs.is_absolute());
        assert!(p.abs.ends_with("config/secrets/bmc-password"));
        let p = base.join("/etc/nodefence/ca.pem");
        assert_eq!(p.display, Path::new("/etc/nodefence/ca.pem"));
        assert_eq!(p.abs, Path::new("/etc/nodefence/ca.pem"));
        let bare = BaseDir::of(&FilePath::given(Path::new("nodefence.toml")).expect("cwd"));
        assert_eq!(
            bare.join("inventory.toml").display,
            Path::new("inventory.toml")
        );
    }
}
