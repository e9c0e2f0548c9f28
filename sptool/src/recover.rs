//! `sptool recover [TARGET.h5]`: the profile of a killed run, from the spill data its
//! processes left (every thread, every rank that reached the file system). The reading is
//! the library's own (`scope_profiler::recover`), so there is one reader of the format.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The default target: `$SCOPE_PROFILER_FILE`, else `profiling_data.h5`.
pub fn default_target() -> PathBuf {
    std::env::var_os("SCOPE_PROFILER_FILE").filter(|f| !f.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("profiling_data.h5"))
}

pub fn run(target: &Path) -> Result<String> {
    let target = if target.is_relative() { std::env::current_dir().map(|d| d.join(target)).unwrap_or_else(|_| target.to_path_buf()) } else { target.to_path_buf() };
    crate::guard::note_input(&target);
    scope_profiler::recover::recover(&target).map(|r| r.message).map_err(|e| Error::in_file(&target, e))
}
