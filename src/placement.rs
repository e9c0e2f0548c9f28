//! Where a profile file is created and how it reaches its name.
//!
//! HDF5 creates files by name, so each profile is created inside a private directory
//! (`safe_file::PrivateDir`: mode 0700, random name, made with `mkdir` next to the target)
//! with `H5F_ACC_EXCL`, checked through the directory's descriptor to be our own file, and
//! made 0600. Nobody else can open, replace or redirect it while it is written, whatever mode
//! HDF5 uses and whether the target directory is group-writable. Finished, it gets the mode the
//! umask gives (0600 in a world-writable fallback directory such as /tmp) and is renamed onto
//! the target: an existing profile there is replaced by the rename (swapped into the private
//! directory in one step where the file system can, then removed with it: ext4 writes back a
//! file that replaces another at once, which an exchange spares finalize), never opened for
//! writing.
//! When the target directory is not usable, the same happens in a fallback directory
//! ($TMPDIR, /tmp, $HOME), where the finished file never replaces anything.

use crate::status::{Error, Result, Status};
use safe_file::PrivateDir;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// Where the file finally went, and why it is not where it was asked to go (if so).
#[derive(Debug, Clone)]
pub struct Written {
    pub path: PathBuf,
    pub fallback_reason: Option<String>,
    /// Said after the fallback message: why the file is private (0600) there.
    pub note: Option<String>,
}

impl Written {
    /// `<why the target was not used>; profile written to <path> instead (<note>)`.
    pub fn fallback_message(&self) -> Option<String> {
        let reason = self.fallback_reason.as_ref()?;
        let note = self.note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
        Some(format!("{reason}; profile written to {} instead{note}", self.path.display()))
    }
}

/// A profile being written in its private directory.
pub struct Placement {
    dir: PrivateDir,
    name: OsString,
    dest: PathBuf,
    fallback_reason: Option<String>,
    mode: u32,
    note: Option<String>,
}

/// Directories tried, in order, when the target directory is not writable.
fn fallback_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("/tmp"));
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(h));
    }
    dirs
}

/// Create the HDF5 file privately for `dest` (see the module documentation).
fn create_in(dest: &Path) -> io::Result<(hdf5::File, PrivateDir, OsString)> {
    safe_file::check_replaceable(dest)?;
    // Made and listed as unfinished in one step under the list's lock, so that a write cut
    // short (`abandon_unfinished`, after which the process ends) finds it whatever step it is
    // at: never a directory made but not yet listed. None is begun once the writes were
    // abandoned (the process is ending).
    let dir = {
        let mut list = unfinished();
        if ABANDONED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::other("the process is ending: no file is begun"));
        }
        let dir = PrivateDir::create(dest)?;
        list.dirs.push(dir.path().to_path_buf());
        dir
    };
    // A reading child (the merge helper) that dies here leaves it to its parent to remove.
    crate::guard::note_temp(dir.path());
    let name = dest.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| crate::config::DEFAULT_FILE.into());
    let file = match hdf5::File::create_excl(dir.path().join(&name)) {
        Ok(f) => f,
        Err(e) => {
            remove_listed(dir, &[]);
            return Err(io::Error::other(e.to_string()));
        }
    };
    // HDF5 created it by name: check through our descriptor that it is in the directory we
    // made (not in one put in its place), then make it 0600.
    if let Err(e) = dir.set_mode(&name, 0o600) {
        drop(file);
        remove_listed(dir, &[&name]);
        return Err(e);
    }
    Ok((file, dir, name))
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn shorten(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn describe_create_error(dest: &Path, e: &io::Error) -> String {
    let dir = safe_file::parent_dir(dest);
    let why = match std::fs::metadata(dir) {
        Err(io) => format!("{}: {io}", dir.display()),
        Ok(m) if m.permissions().readonly() => format!("{} is read-only", dir.display()),
        Ok(_) => e.to_string(),
    };
    format!("cannot write {} ({why})", dest.display())
}

impl Placement {
    /// Create the file for `target` (a directory gets the default file name in it), or in a
    /// fallback directory.
    pub fn create_h5(target: &Path) -> Result<(hdf5::File, Placement)> {
        let mut dest = target.to_path_buf();
        if dest.is_dir() {
            dest.push(crate::config::DEFAULT_FILE);
        }
        let first_error = match create_in(&dest) {
            Ok((file, dir, name)) => {
                let mode = safe_file::new_file_mode();
                return Ok((file, Placement { dir, name, dest, fallback_reason: None, mode, note: None }));
            }
            Err(e) => describe_create_error(&dest, &e),
        };
        Placement::create_h5_fallback(&dest, first_error, &[])
    }

    /// Create the file for `target` in the first fallback directory not in `tried` where that
    /// works; `reason` says why the target (or the directories tried) did not do.
    pub fn create_h5_fallback(target: &Path, reason: String, tried: &[PathBuf]) -> Result<(hdf5::File, Placement)> {
        let stem = target.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profiling_data".into());
        let tail = format!(".{}.{}.h5", crate::metadata::hostname(), std::process::id());
        // A name longer than a file system takes (the target's own may be why it failed) is
        // shortened: the fallback name must fit.
        let stem = shorten(&stem, safe_file::NAME_MAX.saturating_sub(tail.len()).max(16));
        for d in fallback_dirs().into_iter().filter(|d| !tried.contains(d)) {
            let alt = d.join(format!("{stem}{tail}"));
            if let Ok((file, dir, name)) = create_in(&alt) {
                let (mode, note) = if safe_file::is_world_writable(&d) {
                    (0o600, Some(format!("mode 0600, readable only by you: {} is writable by everyone", d.display())))
                } else {
                    (safe_file::new_file_mode(), None)
                };
                return Ok((file, Placement { dir, name, dest: alt, fallback_reason: Some(reason), mode, note }));
            }
        }
        Err(Error::new(Status::WriteFailed, format!("{reason}, and no fallback directory ($TMPDIR, /tmp, $HOME) was writable")))
    }

    /// The directory the file goes to (the target's, or a fallback directory).
    pub fn directory(&self) -> PathBuf {
        safe_file::parent_dir(&self.dest).to_path_buf()
    }

    /// The path the file is meant to get.
    pub fn destination(&self) -> &Path {
        &self.dest
    }

    /// Where the unfinished file is.
    pub fn temporary_path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// Move the finished (closed) file into place with its final mode. The rename happens
    /// under the lock of the unfinished list, with this thread's `when_placed` hook told there:
    /// a write cut short (`abandon_unfinished`) finds the file either unfinished (and removes
    /// it) or in place and told, never in between; none is moved into place after it.
    pub fn finish(self) -> Result<Written> {
        let tmp = self.temporary_path();
        let fail = |e: io::Error, dest: &Path| {
            Error::new(Status::WriteFailed, format!("renaming {} to {}: {e} (the data is in {})", tmp.display(), dest.display(), tmp.display()))
        };
        self.dir.seal(&self.name, self.mode).map_err(|e| fail(e, &self.dest))?;
        let mut fallback_reason = self.fallback_reason.clone();
        // A fresh name beside `dest` that never replaces anything.
        let beside = |dest: &Path| -> Result<PathBuf> {
            let stem = dest.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let alt = dest.with_file_name(format!("{}.{}.h5", shorten(&stem, safe_file::NAME_MAX - 12), &safe_file::random_suffix()[..8]));
            self.dir.move_out_new(&self.name, &alt).map_err(|e| fail(e, &alt))?;
            Ok(alt)
        };
        // A profile an earlier run left at the target: swapped out (`exchange_out`), held open
        // until then and let go of after (`let_go`), so that the kernel frees its pages off the
        // caller's path.
        let earlier = self.fallback_reason.is_none().then(|| safe_file::open_regular(&self.dest).ok()).flatten();
        let mut list = unfinished();
        if ABANDONED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::new(Status::WriteFailed, format!("the process is ending: {} was not moved into place", self.dest.display())));
        }
        // Whether an earlier file at the target was swapped into the private directory.
        let mut swapped = false;
        let path = if self.fallback_reason.is_none() {
            match self.dir.exchange_out(&self.name, &self.dest) {
                Ok(s) => {
                    swapped = s;
                    self.dest.clone()
                }
                // Somebody else's file at the target in a sticky directory (/tmp): keep it,
                // and ours beside it.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    fallback_reason = Some(format!("cannot replace {} ({e})", self.dest.display()));
                    beside(&self.dest)?
                }
                Err(e) => return Err(fail(e, &self.dest)),
            }
        } else {
            // A shared fallback directory: never replace anything, take a fresh name instead.
            match self.dir.move_out_new(&self.name, &self.dest) {
                Ok(()) => self.dest.clone(),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => beside(&self.dest)?,
                Err(e) => return Err(fail(e, &self.dest)),
            }
        };
        let me = this_thread();
        if let Some((_, hook)) = list.hooks.iter_mut().find(|(t, _)| *t == me) {
            hook(&path);
        }
        drop(list);
        let Placement { dir, note, name, .. } = self;
        // The earlier file, swapped in under the profile's name, goes with the directory.
        let earlier_name = [name.as_os_str()];
        remove_listed(dir, if swapped { &earlier_name } else { &[] });
        if let Some(f) = earlier {
            let_go(f);
        }
        Ok(Written { path, fallback_reason, note })
    }

    /// Give up on a half-written (closed) file: remove it and its directory.
    pub fn abandon(self) {
        remove_listed(self.dir, &[&self.name]);
    }
}

/// Close the replaced profile `f` on a short-lived thread of its own (its last reference: the
/// kernel frees its pages then), or here where no helper thread may be started (a write at
/// `dlclose`, after a signal, at exit) or none could be.
fn let_go(f: std::fs::File) {
    if crate::model::helper_threads_allowed() {
        // On error the closure, and the file in it, is dropped right here.
        let _ = std::thread::Builder::new().name("sp-release".into()).spawn(move || drop(f));
    }
}

/// While the returned guard lives, `hook` is told of each file the calling thread moves into
/// place, at the moment of its rename and under the lock that `abandon_unfinished` takes: once
/// that returned, every file in place was told. The hook must be quick and must not begin or
/// finish a file. (Kept with the list, by thread, not in a thread-local: a thread-local with a
/// destructor, first touched by the write at a `dlclose`, would be destroyed after the
/// library is gone.)
pub fn when_placed(hook: PlacedHook) -> WhenPlaced {
    let me = this_thread();
    let mut list = unfinished();
    list.hooks.retain(|(t, _)| *t != me);
    list.hooks.push((me, hook));
    WhenPlaced(std::marker::PhantomData)
}

/// Ends `when_placed`'s hook when dropped (on its thread: it is not `Send`).
pub struct WhenPlaced(std::marker::PhantomData<*const ()>);

impl Drop for WhenPlaced {
    fn drop(&mut self) {
        let me = this_thread();
        let hook = {
            let mut list = unfinished();
            list.hooks.iter().position(|(t, _)| *t == me).map(|i| list.hooks.swap_remove(i))
        };
        // Dropped outside the lock (whatever the hook holds).
        drop(hook);
    }
}

/// The calling thread, as `when_placed` keys its hooks.
fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

/// A thread's `when_placed` hook.
type PlacedHook = Box<dyn FnMut(&Path) + Send>;

/// What the lock of the unfinished list guards: the private directories of files still being
/// written, and the threads' `when_placed` hooks.
struct Unfinished {
    dirs: Vec<PathBuf>,
    hooks: Vec<(libc::pthread_t, PlacedHook)>,
}

/// The private directories of files still being written by this process.
static UNFINISHED: parking_lot::Mutex<Unfinished> = parking_lot::Mutex::new(Unfinished { dirs: Vec::new(), hooks: Vec::new() });

fn unfinished() -> parking_lot::MutexGuard<'static, Unfinished> {
    UNFINISHED.lock()
}

/// Remove a listed private directory (with `names` in it), then take it off the list: listed
/// until it is gone, so that a write cut short meanwhile removes it too.
fn remove_listed(dir: PrivateDir, names: &[&std::ffi::OsStr]) {
    let path = dir.path().to_path_buf();
    dir.remove(names);
    unfinished().dirs.retain(|d| *d != path);
}

/// A write cut short (the deadline after a termination signal, the process about to end):
/// remove every file this process is still writing, with its private directory, so that
/// nothing half-written stays. Returns the directories removed. Never blocks on a writer
/// that holds the list.
pub fn abandon_unfinished() -> Vec<PathBuf> {
    // First: no file is begun from now on (`create_in` looks under the list's lock).
    ABANDONED.store(true, std::sync::atomic::Ordering::SeqCst);
    // The list is held only to make a directory and list it, or to take one entry: waited
    // for a bounded time (a file system that hangs in `mkdir` must not hold the process).
    let Some(mut dirs) = UNFINISHED.try_lock_for(std::time::Duration::from_millis(500)) else { return Vec::new() };
    let out = std::mem::take(&mut dirs.dirs);
    drop(dirs);
    for d in &out {
        remove_private_dir(d);
    }
    out
}

/// Remove a private directory whose writer may still be creating its file in it (HDF5's
/// `open` between our listing of the directory and its `rmdir`): tried again while the
/// directory is not empty, a few times.
fn remove_private_dir(dir: &Path) {
    for _ in 0..50 {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) || e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            _ => return,
        }
    }
}

/// Set once the writes were abandoned (`abandon_unfinished`): no file is begun after it.
static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
