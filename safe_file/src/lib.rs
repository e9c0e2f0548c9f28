//! Creating files that nobody else can redirect, truncate or read before they are finished.
//!
//! Every file is first created in the directory it belongs to, under a name nobody can predict
//! (64 random bits), exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, or `mkdir` for a private
//! directory: both fail on any existing name, a symlink included, and are retried with a new
//! name), readable only by its owner (0600 file, 0700 directory). Only a finished file is
//! renamed onto its final name: an existing file there is replaced, never opened for writing,
//! and a symlink there is replaced itself, never followed.
//!
//! Two shapes, one for each kind of writer:
//! - [`TempFile`]: we write the bytes ourselves (exports, plots, JSON).
//! - [`PrivateDir`]: a library creates the file by name (HDF5). The directory is 0700 and
//!   reached through a descriptor opened when it was made, so what the library creates in it
//!   is out of everyone else's reach whatever mode the library uses.
//!
//! And one for readers: [`files_in`] lists the regular files of a directory without following
//! a symlink out of it (leftover per-rank or spill files).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How many fresh names are tried when a name is taken (64 random bits: a second try already
/// means someone else is creating names there).
const ATTEMPTS: usize = 16;

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn cname(n: &OsStr) -> io::Result<CString> {
    cstr(Path::new(n))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// 64 unpredictable bits as 16 hex digits: getrandom(2), else /dev/urandom. If neither works
/// the name is merely unique (time, pid, counter); exclusive creation still protects it.
pub fn random_suffix() -> String {
    let mut buf = [0u8; 8];
    #[cfg(target_os = "linux")]
    // SAFETY: buf is valid for writes of its length.
    let mut ok = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), libc::GRND_NONBLOCK) } == buf.len() as isize;
    #[cfg(not(target_os = "linux"))]
    let mut ok = false;
    if !ok {
        ok = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).is_ok();
    }
    if !ok {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        buf = (t ^ ((std::process::id() as u64) << 40) ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(20)).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The process umask, read without changing it (/proc/self/status, Linux 4.7+). Unknown:
/// 0o077, the most private answer.
pub fn umask() -> u32 {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("Umask:") {
                if let Ok(m) = u32::from_str_radix(v.trim(), 8) {
                    return m;
                }
            }
        }
    }
    0o077
}

/// The mode the user's umask gives a new file (what `open(..., 0666)` would give).
pub fn new_file_mode() -> u32 {
    0o666 & !umask()
}

/// Whether everybody may create files in `dir` (/tmp, /var/tmp): what we leave there is 0600.
pub fn is_world_writable(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.mode() & 0o002 != 0)
}

/// The directory `dest` belongs in.
pub fn parent_dir(dest: &Path) -> &Path {
    dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// `.<file name>.<random>.<kind>`: hidden, so that a wildcard over finished files never
/// picks up an unfinished one.
fn hidden_name(dest: &Path, kind: &str) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let suffix = format!(".{}.{kind}", random_suffix());
    // A name may have NAME_MAX (255) bytes: a long destination name is shortened here (the
    // name is only seen while the file is unfinished).
    let base = dest.file_name().unwrap_or(OsStr::new("file")).as_bytes();
    let keep = base.len().min(NAME_MAX - 1 - suffix.len());
    let mut name = b".".to_vec();
    name.extend_from_slice(&base[..keep]);
    name.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(name)
}

/// The longest file name (bytes) the file systems we write to take.
pub const NAME_MAX: usize = 255;

/// Whether a finished file may be renamed onto `dest`: nothing there, a regular file, or a
/// symlink to a regular file or to nothing (the link itself is replaced). A directory, device,
/// FIFO or socket (also behind a symlink: `/dev/stdout`, `/dev/null`) is never replaced.
pub fn check_replaceable(dest: &Path) -> io::Result<()> {
    match std::fs::metadata(dest) {
        Ok(m) if !m.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} exists and is not a regular file", dest.display()),
        )),
        _ => Ok(()),
    }
}

/// Create `path` exclusively: `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, read-write, `mode`.
/// Fails with `AlreadyExists` on any existing name, a dangling symlink included.
pub fn create_exclusive(path: &Path, mode: u32) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A private (0600) temporary file next to its destination, renamed onto it by
/// [`TempFile::persist`]; removed if dropped unfinished.
pub struct TempFile {
    file: File,
    path: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl TempFile {
    /// Create `.<name>.<random>.tmp` in `dest`'s directory (see the module documentation).
    pub fn create(dest: &Path) -> io::Result<TempFile> {
        check_replaceable(dest)?;
        let dir = parent_dir(dest);
        for _ in 0..ATTEMPTS {
            let path = dir.join(hidden_name(dest, "tmp"));
            match create_exclusive(&path, 0o600) {
                Ok(file) => return Ok(TempFile { file, path, dest: dest.to_path_buf(), done: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("no free temporary name in {} after {ATTEMPTS} tries", dir.display())))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Flush to disk, give the file `mode`, rename it onto the destination.
    pub fn persist(mut self, mode: u32) -> io::Result<PathBuf> {
        self.file.sync_all()?;
        self.file.set_permissions(std::fs::Permissions::from_mode(mode))?; // fchmod: our own descriptor
        std::fs::rename(&self.path, &self.dest)?;
        self.done = true;
        sync_dir(parent_dir(&self.dest));
        Ok(self.dest.clone())
    }
}

impl Write for TempFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Whether `dest` is a FIFO, socket or character device the user meant to write into
/// (`-o /dev/stdout`, `-o >(gzip)`): the name itself, or a symlink owned by us or by root
/// (never one somebody else planted) that leads to one.
fn is_stream(dest: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let stream = |m: &std::fs::Metadata| {
        let t = m.file_type();
        t.is_fifo() || t.is_socket() || t.is_char_device()
    };
    match std::fs::symlink_metadata(dest) {
        Ok(l) if l.file_type().is_symlink() => {
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            (l.uid() == me || l.uid() == 0) && std::fs::metadata(dest).is_ok_and(|m| stream(&m))
        }
        Ok(l) => stream(&l),
        Err(_) => false,
    }
}

/// Write `bytes` as the new content of `dest`: a private temporary file renamed into place,
/// with the mode the umask gives. A FIFO or terminal named by the user is written directly.
pub fn write_replacing(dest: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    let mut r = Replacement::create(dest)?;
    r.write_all(bytes)?;
    r.finish()
}

/// The new content of `dest`, written as it is produced (output too large to hold in memory),
/// the way `write_replacing` writes it: a private temporary file that `finish` renames into
/// place (dropped unfinished, it is removed), or a FIFO or terminal named by the user.
pub enum Replacement {
    Stream(File, PathBuf),
    Temp(TempFile),
}

impl Replacement {
    pub fn create(dest: &Path) -> io::Result<Replacement> {
        if is_stream(dest) {
            // Opened without blocking: a FIFO nobody reads yet is refused (ENXIO), never waited for.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(dest)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENXIO) => io::Error::new(io::ErrorKind::WouldBlock, "nobody reads it (a FIFO with no reader yet, or a socket): start the reader first"),
                    _ => e,
                })?;
            // Then blocking writes, as into any pipe.
            // SAFETY: a descriptor we own.
            unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::fcntl(f.as_raw_fd(), libc::F_GETFL) & !libc::O_NONBLOCK) };
            return Ok(Replacement::Stream(f, dest.to_path_buf()));
        }
        Ok(Replacement::Temp(TempFile::create(dest)?))
    }

    /// Done: rename the temporary file onto the destination (with the mode the umask gives).
    pub fn finish(self) -> io::Result<PathBuf> {
        match self {
            Replacement::Stream(_, dest) => Ok(dest),
            Replacement::Temp(t) => t.persist(new_file_mode()),
        }
    }
}

impl Write for Replacement {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Replacement::Stream(f, _) => f.write(buf),
            Replacement::Temp(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Replacement::Stream(f, _) => f.flush(),
            Replacement::Temp(t) => t.flush(),
        }
    }
}

/// A private directory (0700) next to a destination, for files a library creates by name.
/// Every operation on its content goes through the descriptor opened when it was made, so
/// renaming the directory away and putting another one in its place redirects nothing.
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl PrivateDir {
    /// `mkdir` `.<name>.<random>.tmpdir` in `dest`'s directory with mode 0700 (exclusive:
    /// `mkdir` never reuses or follows an existing name), retried on collision, then opened
    /// with `O_NOFOLLOW` and checked to be our own directory.
    pub fn create(dest: &Path) -> io::Result<PrivateDir> {
        let parent = parent_dir(dest);
        for _ in 0..ATTEMPTS {
            let path = parent.join(hidden_name(dest, "tmpdir"));
            let c = cstr(&path)?;
            // SAFETY: c is a valid NUL-terminated path.
            if unsafe { libc::mkdir(c.as_ptr(), 0o700) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::AlreadyExists {
                    continue;
                }
                return Err(e);
            }
            // SAFETY: as above; the returned descriptor is owned below.
            let fd = match check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) }) {
                Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
                Err(e) => return Err(e), // replaced already: not ours to remove
            };
            let dir = PrivateDir { fd, path };
            let st = dir.fstatat(None)?;
            // SAFETY: geteuid has no preconditions.
            if st.st_uid != unsafe { libc::geteuid() } || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(io::Error::other(format!("{} was replaced while being created", dir.path.display())));
            }
            // The umask may have taken bits from 0700; make it exactly that.
            // SAFETY: valid descriptor.
            check(unsafe { libc::fchmod(dir.fd.as_raw_fd(), 0o700) })?;
            return Ok(dir);
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("no free directory name in {} after {ATTEMPTS} tries", parent.display())))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fstatat(&self, name: Option<&OsStr>) -> io::Result<libc::stat> {
        // SAFETY: zeroed stat is a valid out-buffer; names are NUL-terminated.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match name {
            None => check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?,
            Some(n) => {
                let c = cname(n)?;
                check(unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?
            }
        };
        Ok(st)
    }

    /// Open `name` inside (never through a symlink) and check that it is a regular file of ours.
    fn open_own(&self, name: &OsStr) -> io::Result<File> {
        let c = cname(name)?;
        // SAFETY: valid descriptor and name; the result is owned below.
        let fd = check(unsafe {
            libc::openat(self.fd.as_raw_fd(), c.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        })?;
        let file = unsafe { File::from_raw_fd(fd) };
        let m = file.metadata()?;
        // SAFETY: geteuid has no preconditions.
        if !m.is_file() || m.uid() != unsafe { libc::geteuid() } {
            return Err(io::Error::other(format!("{} is not our file", self.path.join(name).display())));
        }
        Ok(file)
    }

    /// Check that `name` is a regular file of ours in this very directory (not in one put in
    /// its place) and make it `mode`.
    pub fn set_mode(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        self.open_own(name)?.set_permissions(std::fs::Permissions::from_mode(mode))
    }

    /// Like [`PrivateDir::set_mode`]: the finished file, checked to be ours, gets its final
    /// mode. It is not flushed to disk first: a finished file is whole in the page cache, which
    /// outlives the process however it ends; an `fsync` would only guard against the node
    /// itself crashing in the seconds before write-back, and costs as much as a third of the
    /// write (67 ms for 240 MB here, far more on parallel file systems).
    pub fn seal(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        self.open_own(name)?.set_permissions(std::fs::Permissions::from_mode(mode))
    }

    /// Rename `name` onto `dest`, replacing a regular file or symlink there (never writing into
    /// it or following it). Nor is the directory flushed after it, for the reason a sealed file
    /// is not (see [`PrivateDir::seal`]): the new entry is in the kernel's cache, which outlives
    /// the process however it ends, and flushing it alone would not make the file's data durable.
    pub fn move_out(&self, name: &OsStr, dest: &Path) -> io::Result<()> {
        check_replaceable(dest)?;
        let (n, d) = (cname(name)?, cstr(dest)?);
        // SAFETY: valid descriptor and NUL-terminated names.
        check(unsafe { libc::renameat(self.fd.as_raw_fd(), n.as_ptr(), libc::AT_FDCWD, d.as_ptr()) })?;
        Ok(())
    }

    /// [`PrivateDir::move_out`], where a file already at `dest` is swapped in rather than
    /// replaced (`RENAME_EXCHANGE`, as atomic for readers of `dest`): it is then in this
    /// directory under `name`, for the caller to remove. Some file systems do work at a rename
    /// that replaces a file which an exchange spares them (ext4 writes back a replacing file's
    /// delayed blocks at once: 60-120 ms for a profile of 240 MB). `Ok(true)` when swapped,
    /// `Ok(false)` when moved as `move_out` does (nothing at `dest`, or no exchange on this
    /// file system).
    pub fn exchange_out(&self, name: &OsStr, dest: &Path) -> io::Result<bool> {
        check_replaceable(dest)?;
        #[cfg(target_os = "linux")]
        {
            let (n, d) = (cname(name)?, cstr(dest)?);
            // SAFETY: valid descriptor and NUL-terminated names.
            let rc = unsafe { libc::renameat2(self.fd.as_raw_fd(), n.as_ptr(), libc::AT_FDCWD, d.as_ptr(), libc::RENAME_EXCHANGE) };
            match check(rc) {
                Ok(_) => return Ok(true),
                // Nothing there to swap, or no exchange here: an ordinary rename.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EXDEV)) => {}
                Err(e) => return Err(e),
            }
        }
        self.move_out(name, dest).map(|()| false)
    }

    /// Rename `name` onto `dest` only if nothing is there (`AlreadyExists` otherwise). Not yet
    /// flushed, as with [`PrivateDir::move_out`].
    pub fn move_out_new(&self, name: &OsStr, dest: &Path) -> io::Result<()> {
        let (n, d) = (cname(name)?, cstr(dest)?);
        #[cfg(target_os = "linux")]
        {
            // SAFETY: valid descriptor and NUL-terminated names.
            let rc = unsafe { libc::renameat2(self.fd.as_raw_fd(), n.as_ptr(), libc::AT_FDCWD, d.as_ptr(), libc::RENAME_NOREPLACE) };
            match check(rc) {
                Ok(_) => return Ok(()),
                Err(e) if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => return Err(e),
                Err(_) => {} // file system without RENAME_NOREPLACE: a hard link never replaces either
            }
        }
        // SAFETY: as above.
        check(unsafe { libc::linkat(self.fd.as_raw_fd(), n.as_ptr(), libc::AT_FDCWD, d.as_ptr(), 0) })?;
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), n.as_ptr(), 0) };
        Ok(())
    }

    /// Remove `names` from the directory (those still there) and the directory itself.
    pub fn remove(self, names: &[&OsStr]) {
        for n in names {
            if let Ok(c) = cname(n) {
                // SAFETY: valid descriptor and name.
                unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
            }
        }
        // Only an empty directory goes: if ours was swapped for another, that one is not emptied.
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A regular file found by [`files_in`], opened read-only.
pub struct Found {
    pub name: OsString,
    /// `dir/name`, for messages.
    pub path: PathBuf,
    pub file: File,
}

impl Found {
    /// A name that leads to exactly the file opened, for libraries that open by name (HDF5):
    /// `/proc/self/fd/<fd>` where /proc exists, else `path`.
    pub fn open_path(&self) -> PathBuf {
        let p = PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()));
        if p.exists() { p } else { self.path.clone() }
    }
}

/// The regular files directly in `dir` whose names `want` accepts, sorted by name, each opened
/// from `dir`'s own descriptor with `O_NOFOLLOW`: a symlink (wherever it points), directory,
/// FIFO or device is never opened; those are returned second so that the caller can say so.
pub fn files_in(dir: &Path, want: impl Fn(&OsStr) -> bool) -> io::Result<(Vec<Found>, Vec<PathBuf>)> {
    let c = cstr(dir)?;
    // SAFETY: valid path; owned below.
    let dfd = unsafe { OwnedFd::from_raw_fd(check(libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC))?) };
    let mut names: Vec<OsString> = std::fs::read_dir(format!("/proc/self/fd/{}", dfd.as_raw_fd()))
        .or_else(|_| std::fs::read_dir(dir))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| want(n))
        .collect();
    names.sort();
    let (mut found, mut skipped) = (Vec::new(), Vec::new());
    for name in names {
        let path = dir.join(&name);
        let Ok(cn) = cname(&name) else { continue };
        // SAFETY: valid descriptor and name; owned below.
        let fd = unsafe { libc::openat(dfd.as_raw_fd(), cn.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            skipped.push(path);
            continue;
        }
        let file = unsafe { File::from_raw_fd(fd) };
        if file.metadata().is_ok_and(|m| m.is_file()) {
            found.push(Found { name, path, file });
        } else {
            skipped.push(path);
        }
    }
    Ok((found, skipped))
}

/// What a file's mode says it is, for a one-line refusal ("is a FIFO").
pub fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO (named pipe)",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFLNK => "a symbolic link",
        _ => "not a file of a known type",
    }
}

/// The error of a path that is not what it must be: `InvalidInput`, "is a FIFO (named pipe),
/// not a regular file". [`not_kind`] tells such an error from the others.
fn wrong_kind(mode: u32, want: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, WrongKind { is: kind_of(mode), dir: mode & libc::S_IFMT == libc::S_IFDIR, want: want.to_string() })
}

#[derive(Debug)]
struct WrongKind {
    is: &'static str,
    dir: bool,
    want: String,
}

impl std::fmt::Display for WrongKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "is {}, not {}", self.is, self.want)
    }
}

impl std::error::Error for WrongKind {}

/// For an error of [`open_regular`] or [`open_dir`] that says the path is of the wrong kind:
/// what it is ("a FIFO (named pipe)") and whether that is a directory.
pub fn not_kind(e: &io::Error) -> Option<(&'static str, bool)> {
    e.get_ref().and_then(|i| i.downcast_ref::<WrongKind>()).map(|w| (w.is, w.dir))
}

fn stat_path(c: &CString) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-buffer; c is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::stat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

fn fstat_fd(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: as above, on a descriptor we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// Open a path named by a user, the environment or a file (never trusted) for reading, only
/// if it is a regular file (a symlink to one is followed). Nothing else is ever opened: the
/// type is checked with `stat` first (a FIFO, socket, device or directory is refused without
/// an `open`, so no device is woken and nothing blocks), then opened with
/// `O_NONBLOCK|O_NOCTTY` (a FIFO put in its place in between cannot block us either) and
/// checked again on the descriptor: the file read is the one checked. A wrong kind is an
/// `InvalidInput` error saying what the path is ("is a FIFO (named pipe), not a regular file").
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_checked(path, libc::S_IFREG, 0, "a regular file")
}

/// The content of a regular file ([`open_regular`]: nothing else is opened), at most `max`
/// bytes: a longer file is an `InvalidData` error saying so.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("longer than {max} bytes")));
    }
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_regular(path, max)?).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Like [`open_regular`], for a path that must be a directory (`O_DIRECTORY`).
pub fn open_dir(path: &Path) -> io::Result<File> {
    open_checked(path, libc::S_IFDIR, libc::O_DIRECTORY, "a directory")
}

fn open_checked(path: &Path, want: u32, flags: libc::c_int, what: &str) -> io::Result<File> {
    let c = cstr(path)?;
    let st = stat_path(&c)?;
    if st.st_mode & libc::S_IFMT != want {
        return Err(wrong_kind(st.st_mode, what));
    }
    // SAFETY: c is NUL-terminated; the descriptor is owned below.
    let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | flags) })?;
    let file = unsafe { File::from_raw_fd(fd) };
    let now = fstat_fd(fd)?;
    if now.st_mode & libc::S_IFMT != want {
        return Err(wrong_kind(now.st_mode, what));
    }
    if want == libc::S_IFREG {
        // Back to blocking reads (no effect on a regular file, but what a reader expects).
        // SAFETY: a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK) };
    }
    Ok(file)
}

/// Whether an open file lives on a kernel pseudo file system (procfs, sysfs, debugfs,
/// tracefs, securityfs, cgroup, configfs, bpf, ...) or a device file system, whose "regular
/// files" report a size that is not what a read gives, and may block or have side effects.
pub fn on_pseudo_fs(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: zeroed statfs is a valid out-buffer; a descriptor we own.
        let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut sf) } != 0 {
            return true; // cannot tell: assume the worst
        }
        const PSEUDO: &[i64] = &[
            0x9fa0,     // proc
            0x6265_6572, // sysfs
            0x6462_6720, // debugfs
            0x7472_6163, // tracefs
            0x7365_6375, // securityfs
            0x27e0eb,   // cgroup
            0x6367_7270, // cgroup2
            0x6265_6570, // configfs
            0xcafe_4a11, // bpf
            0x1cd1,     // devpts
            0x6e73_6673, // nsfs
            0x5a3c_69f0, // aafs (apparmor)
            0x7363_6673, // selinuxfs
            0x4249_4e4d, // binfmt_misc
            0x6165_676c, // pstore
            0xde5e_81e4, // efivarfs
        ];
        PSEUDO.contains(&(sf.f_type as i64))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("safe_file_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn suffixes_are_random_hex() {
        let a = random_suffix();
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_suffix());
    }

    #[test]
    fn umask_is_read_without_changing_it() {
        // SAFETY: umask is process-wide; this test sets it to what it was.
        let old = unsafe { libc::umask(0o027) };
        assert_eq!(umask(), 0o027);
        assert_eq!(new_file_mode(), 0o640);
        unsafe { libc::umask(old) };
    }

    #[test]
    fn temp_file_replaces_by_rename_and_never_writes_through_a_symlink() {
        let d = scratch("temp");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let dest = d.join("out.csv");
        std::os::unix::fs::symlink(&victim, &dest).unwrap();
        let mut t = TempFile::create(&dest).unwrap();
        let tmp = t.path().to_path_buf();
        assert_eq!(std::fs::metadata(&tmp).unwrap().mode() & 0o777, 0o600);
        assert!(tmp.file_name().unwrap().to_str().unwrap().starts_with(".out.csv."));
        t.write_all(b"new").unwrap();
        t.persist(0o640).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let m = std::fs::symlink_metadata(&dest).unwrap();
        assert!(m.is_file());
        assert_eq!(m.mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert!(!tmp.exists());
        // Dropped unfinished: nothing left behind.
        let t = TempFile::create(&dest).unwrap();
        let tmp = t.path().to_path_buf();
        drop(t);
        assert!(!tmp.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn exclusive_creation_refuses_symlinks_and_files() {
        let d = scratch("excl");
        std::fs::write(d.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("l")).unwrap();
        assert_eq!(create_exclusive(&d.join("f"), 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(create_exclusive(&d.join("l"), 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert!(!d.join("nowhere").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn private_dir_moves_files_out() {
        let d = scratch("pdir");
        let dest = d.join("p.h5");
        let pd = PrivateDir::create(&dest).unwrap();
        assert_eq!(std::fs::metadata(pd.path()).unwrap().mode() & 0o777, 0o700);
        let name = OsStr::new("p.h5");
        std::fs::write(pd.path().join(name), "data").unwrap();
        pd.set_mode(name, 0o644).unwrap();
        std::fs::write(&dest, "old").unwrap();
        pd.move_out(name, &dest).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "data");
        assert_eq!(std::fs::metadata(&dest).unwrap().mode() & 0o777, 0o644);
        // move_out_new never replaces.
        std::fs::write(pd.path().join(name), "second").unwrap();
        assert_eq!(pd.move_out_new(name, &dest).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        pd.move_out_new(name, &d.join("q.h5")).unwrap();
        let path = pd.path().to_path_buf();
        pd.remove(&[name]);
        assert!(!path.exists());
        assert_eq!(std::fs::read_to_string(d.join("q.h5")).unwrap(), "second");
        // A device is never replaced.
        assert!(check_replaceable(Path::new("/dev/null")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn exchange_out_swaps_an_earlier_file_in_and_moves_otherwise() {
        use std::os::unix::fs::MetadataExt;
        let d = scratch("exchange");
        let dest = d.join("p.h5");
        let pd = PrivateDir::create(&dest).unwrap();
        let name = OsStr::new("p.h5");
        // Nothing there: moved.
        std::fs::write(pd.path().join(name), "first").unwrap();
        assert!(!pd.exchange_out(name, &dest).unwrap());
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "first");
        assert!(!pd.path().join(name).exists());
        // An earlier file: swapped in, the new one in place (on ext4 and tmpfs; a file system
        // without the exchange replaces it).
        let earlier = std::fs::metadata(&dest).unwrap().ino();
        std::fs::write(pd.path().join(name), "second").unwrap();
        let swapped = pd.exchange_out(name, &dest).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "second");
        // SAFETY: zeroed statfs is a valid out-buffer; the path is NUL-terminated.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statfs(cstr(&d).unwrap().as_ptr(), &mut st) }, 0);
        // ext4, tmpfs, xfs, btrfs: file systems that have the exchange.
        if [0xEF53, 0x0102_1994, 0x5846_5342, 0x9123_683E].contains(&(st.f_type as i64)) {
            assert!(swapped, "file system {:#x} has RENAME_EXCHANGE", st.f_type);
        }
        if swapped {
            assert_eq!(std::fs::metadata(pd.path().join(name)).unwrap().ino(), earlier, "the earlier file, under the profile's name");
        } else {
            assert!(!pd.path().join(name).exists());
        }
        // A symlink at the target is swapped in itself (never followed), its target untouched.
        std::fs::write(d.join("target"), "keep").unwrap();
        std::fs::remove_file(&dest).unwrap();
        std::os::unix::fs::symlink(d.join("target"), &dest).unwrap();
        let _ = std::fs::remove_file(pd.path().join(name));
        std::fs::write(pd.path().join(name), "third").unwrap();
        pd.exchange_out(name, &dest).unwrap();
        assert!(!std::fs::symlink_metadata(&dest).unwrap().file_type().is_symlink());
        assert_eq!((std::fs::read_to_string(&dest).unwrap().as_str(), std::fs::read_to_string(d.join("target")).unwrap().as_str()), ("third", "keep"));
        // A device is never replaced.
        assert!(pd.exchange_out(name, Path::new("/dev/null")).is_err());
        pd.remove(&[name]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_in_skips_symlinks() {
        let d = scratch("find");
        let outside = scratch("find_outside");
        std::fs::write(outside.join("secret.rank1.h5"), "s").unwrap();
        std::fs::write(d.join("a.rank0.h5"), "a").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.rank1.h5"), d.join("a.rank1.h5")).unwrap();
        std::fs::create_dir(d.join("a.rank2.h5")).unwrap();
        let (found, skipped) = files_in(&d, |n| n.to_string_lossy().contains(".rank")).unwrap();
        assert_eq!(found.iter().map(|f| f.name.clone()).collect::<Vec<_>>(), vec![OsString::from("a.rank0.h5")]);
        assert_eq!(skipped, vec![d.join("a.rank1.h5"), d.join("a.rank2.h5")]);
        assert_eq!(std::fs::read_to_string(found[0].open_path()).unwrap(), "a");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
    #[test]
    fn open_regular_refuses_every_other_kind_without_blocking() {
        let d = scratch("kinds");
        std::fs::write(d.join("f"), "x").unwrap();
        assert_eq!(std::io::read_to_string(open_regular(&d.join("f")).unwrap()).unwrap(), "x");
        let fifo = cstr(&d.join("fifo")).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let sock = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
        for (p, is) in [
            (d.join("fifo"), "a FIFO"),
            (d.join("sock"), "a socket"),
            (d.clone(), "a directory"),
            (PathBuf::from("/dev/zero"), "a character device"),
        ] {
            let e = open_regular(&p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{p:?}");
            assert!(e.to_string().starts_with(&format!("is {is}")), "{p:?}: {e}");
            assert!(not_kind(&e).is_some());
        }
        drop(sock);
        assert!(open_dir(&d).is_ok());
        assert!(open_dir(&d.join("f")).unwrap_err().to_string().contains("is a regular file, not a directory"));
        assert_eq!(open_regular(&d.join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(on_pseudo_fs(&open_regular(Path::new("/proc/self/status")).unwrap()));
        assert!(!on_pseudo_fs(&open_regular(&d.join("f")).unwrap()));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
