//! The one error type of sptool: a message, optionally about one file.
//!
//! Every failure the user can cause (a missing file, a damaged file, a bad
//! regular expression, ...) ends up here and is printed as a single line,
//! `sptool: FILE: what is wrong`, by `main`.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Error {
    file: Option<PathBuf>,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error not tied to a file (a bad option value).
    pub fn new(message: impl Into<String>) -> Self {
        Self { file: None, message: message.into() }
    }

    /// An error about `file`.
    pub fn in_file(file: &Path, message: impl Into<String>) -> Self {
        Self { file: Some(file.to_path_buf()), message: message.into() }
    }

    /// Attach `file` unless the error already names one.
    pub fn or_file(mut self, file: &Path) -> Self {
        if self.file.is_none() {
            self.file = Some(file.to_path_buf());
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = one_line(&self.message);
        match &self.file {
            Some(file) => write!(f, "{}: {message}", file.display()),
            None => f.write_str(&message),
        }
    }
}

impl std::error::Error for Error {}

/// Collapse a (possibly multi-line) message onto one line.
pub fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// One-line summary of an HDF5 library error. Its text may quote names from the file,
/// so invalid UTF-8 in it is replaced.
pub fn h5(err: &hdf5::Error) -> String {
    one_line(&String::from_utf8_lossy(err.to_string().as_bytes()))
}
