//! The flight recorder's spill sink: the call-log chunks of every thread live in a
//! `MAP_SHARED` mapping of one spill file per process, so every stored call is in the kernel's
//! page cache and survives a SIGKILL, a crash or an OOM kill.
//!
//! A run directory `.<stem>.spill.<random>/` (mode 0700) holds, per process:
//! * `calls.spill`: a header page, then chunks (format in `calllog.rs`), appended on the cold
//!   path: each chunk's blocks are allocated with `posix_fallocate` before it is mapped, so a
//!   full disk is seen here (and recording goes on in memory) instead of as SIGBUS later;
//!   a full chunk is unmapped, so recording keeps one chunk per log resident;
//! * `names`: region names, one record (`id u32, len u32, bytes`) appended per registration;
//! * `threads`: one record (`index u32, 0 u32, os tid i64`) per recording thread;
//! * `anchors`: the TSC clock's anchors (`tick, ns, half width`, i64 each), appended when a
//!   chunk is opened and at finalize (empty with the monotonic clock);
//! * `meta.json`: what recovery needs to write the normal file (rank, target, metadata, clock).
//!
//! Every file is created with `safe_file::create_exclusive` (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode
//! 0600). This is the storage under the call log: it knows chunks as words at file offsets,
//! not what they hold. The one decoder of a chunk is `calllog::decode_chunk`: finalize reads
//! its own logs' spilled chunks through a read-only mapping of the spill file (`open_reader`,
//! `spilled_words`), and recovery (`recover::read_run`, the one reader of a run directory)
//! adopts the chunks of a spill file into `CallLog`s read the same way.

use crate::clock::Anchor;
use crate::model::{AttrValue, RankInfo};
use crate::warn;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Words per page: the smallest spilled chunk (mappings are page-aligned).
pub const PAGE_WORDS: usize = 512;
pub const HEADER_BYTES: u64 = 4096;
pub const FILE_MAGIC: &[u8; 8] = b"SPSPILL3";
pub const FORMAT_VERSION: u64 = 3;
pub const CALLS_FILE: &str = "calls.spill";
pub const META_FILE: &str = "meta.json";
pub const NAMES_FILE: &str = "names";
pub const THREADS_FILE: &str = "threads";
pub const ANCHORS_FILE: &str = "anchors";

/// Environment switches of the flight recorder.
pub mod env {
    /// `1`/`0`: spill call logs to a file mapping (default off).
    pub const SPILL: &str = "SCOPE_PROFILER_SPILL";
    /// Directory under which the run directory is created (default: the output file's
    /// directory); setting it turns the recorder on unless `SCOPE_PROFILER_SPILL` says 0.
    pub const SPILL_DIR: &str = "SCOPE_PROFILER_SPILL_DIR";
}

/// Is the recorder on when the environment does not say? (Off: it costs the hot path.)
pub const DEFAULT_ON: bool = false;

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Taken on the cold paths only; the write after a signal reaches it from a thread of its own,
/// bounded by a deadline (`signals`), never from inside the handler.
static SPILL: Mutex<Option<Spill>> = Mutex::new(None);
/// A read-only mapping of the spill file whose chunks are being read (finalize or recovery).
static READER: Mutex<Option<Mapping>> = Mutex::new(None);
/// Held from a reader's mapping to its unmapping: the mapping is one per process, so two
/// readings at once (recoveries on several threads, a recovery beside a finalize) take turns
/// instead of one unmapping the file the other reads.
static READING: Mutex<()> = Mutex::new(());
/// Finalize holds `READING` from `open_reader` to `finish` (one function to the other: the
/// guard is let go of and the lock released by hand).
static FINALIZE_READS: AtomicBool = AtomicBool::new(false);

/// A read-only mapping of a whole spill file (null and 0 for an empty file).
pub struct Mapping {
    pub base: *const u8,
    pub len: usize,
}

// SAFETY: a read-only mapping, unmapped only when its reading ends (`Reading`, `finish`).
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: mapped by `map_reader` with this length.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        }
    }
}

struct Spill {
    dir: PathBuf,
    calls: File,
    names: File,
    threads: File,
    anchors: File,
    anchors_saved: usize,
    end: u64,
    /// Chunks handed out (recorded in the header with `end`, see `ALLOCATED_AT`).
    chunks: u64,
}

/// Byte offset in the header of the file's allocated end and the number of chunks handed
/// out (two little-endian u64, rewritten at every new chunk): recovery compares them with
/// what it finds, so that a file cut short (a truncated copy, a disk that lost its tail) is
/// counted, not taken as complete. Zero in files of earlier versions: unknown.
pub const ALLOCATED_AT: u64 = 24;

fn lock() -> parking_lot::MutexGuard<'static, Option<Spill>> {
    SPILL.lock()
}

fn reader() -> parking_lot::MutexGuard<'static, Option<Mapping>> {
    READER.lock()
}

/// Are new chunks spilled? (Read on the cold path only.)
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// The run directory of this process, while the recorder is on.
pub fn run_dir() -> Option<PathBuf> {
    lock().as_ref().map(|s| s.dir.clone())
}

/// What recovery needs to know about the process that spilled.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SpillMeta {
    pub format_version: u64,
    pub pid: i64,
    /// World rank and size from the launcher's environment, if any.
    pub rank: Option<i64>,
    pub size: Option<i64>,
    pub target: PathBuf,
    pub verbosity: u32,
    /// Layout name (`regions`, `columnar`, `aggregate`).
    pub layout: String,
    /// `metadata/` attributes as known at setup.
    pub metadata: Vec<(String, AttrValue)>,
    pub full_metadata: bool,
    pub info: RankInfo,
    /// `tsc` (ticks, converted through the saved anchors) or `monotonic` (ns as they are).
    pub clock: String,
    pub clock_note: Option<String>,
    /// The kernel's boot id: recovery on the same boot may take a fresh anchor.
    pub boot_id: String,
    /// Wall-clock time (UTC ISO 8601) of setup.
    pub started: String,
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn create_private(path: &Path) -> std::io::Result<File> {
    safe_file::create_exclusive(path, 0o600)
}

/// Is the recorder requested for this run?
pub fn requested() -> bool {
    if std::env::var_os(env::SPILL_DIR).is_some_and(|d| !d.is_empty()) && std::env::var(env::SPILL).is_err() {
        return true;
    }
    match std::env::var(env::SPILL).ok().as_deref().map(|v| v.trim().to_ascii_lowercase()) {
        None => DEFAULT_ON,
        Some(v) if matches!(v.as_str(), "1" | "on" | "true" | "yes") => true,
        Some(v) if matches!(v.as_str(), "0" | "off" | "false" | "no" | "") => false,
        Some(v) => {
            warn::once("env:spill", &format!("ignoring {}={v:?}: expected 0 or 1", env::SPILL));
            DEFAULT_ON
        }
    }
}

/// Prefix of the run directories that belong to `target`.
pub fn dir_prefix(target: &Path) -> String {
    let stem = target.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profiling_data".into());
    format!(".{stem}.spill.")
}

/// The suffix of a run directory being removed (renamed first, see `remove_run_dir`).
pub const REMOVING: &str = ".removing";

/// Remove a run directory whose calls are in the profile now: renamed first (one atomic step),
/// so that a kill during the removal leaves a directory that no reader takes for calls and
/// that `sptool recover` removes (`recover::remove_unfinished_writes`).
pub fn remove_run_dir(dir: &Path) {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(REMOVING);
    let gone = dir.with_file_name(name);
    let dir = if std::fs::rename(dir, &gone).is_ok() { gone.as_path() } else { dir };
    let _ = std::fs::remove_dir_all(dir);
}

/// Where run directories of `target` are created and searched.
pub fn spill_parent(target: &Path) -> PathBuf {
    match std::env::var_os(env::SPILL_DIR).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
    }
}

/// A new run directory `.<stem>.spill.[r<rank>.]<random>/` (mode 0700) for `meta`'s target.
fn make_run_dir(meta: &SpillMeta) -> Result<PathBuf, String> {
    let parent = spill_parent(&meta.target);
    let prefix = dir_prefix(&meta.target);
    for _ in 0..16 {
        let rank = meta.rank.map(|r| format!("r{r}.")).unwrap_or_default();
        let dir = parent.join(format!("{prefix}{rank}{}", safe_file::random_suffix()));
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create the spill directory {}: {e}", dir.display())),
        }
    }
    Err(format!("cannot create a spill directory in {}", parent.display()))
}

/// `meta.json` and the header page of `calls.spill` in a new run directory.
fn create_files(dir: &Path, meta: &SpillMeta) -> std::io::Result<File> {
    let mut m = create_private(&dir.join(META_FILE))?;
    m.write_all(&serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?)?;
    let calls = create_private(&dir.join(CALLS_FILE))?;
    let mut header = vec![0u8; HEADER_BYTES as usize];
    header[..8].copy_from_slice(FILE_MAGIC);
    header[8..16].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&meta.pid.to_le_bytes());
    calls.write_all_at(&header, 0)?;
    Ok(calls)
}

/// Start spilling for this process. On failure the run records in memory, with a warning.
pub fn start(meta: &SpillMeta) -> Result<PathBuf, String> {
    let dir = make_run_dir(meta)?;
    let made = (|| -> std::io::Result<Spill> {
        let calls = create_files(&dir, meta)?;
        let names = create_private(&dir.join(NAMES_FILE))?;
        let threads = create_private(&dir.join(THREADS_FILE))?;
        let anchors = create_private(&dir.join(ANCHORS_FILE))?;
        Ok(Spill { dir: dir.clone(), calls, names, threads, anchors, anchors_saved: 0, end: HEADER_BYTES, chunks: 0 })
    })();
    match made {
        Ok(mut s) => {
            save_anchors_locked(&mut s, None);
            *lock() = Some(s);
            ACTIVE.store(true, Ordering::Release);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(format!("cannot create the spill files in {}: {e}", dir.display()))
        }
    }
}

/// Append the anchors not yet saved (`all`: the run's final list, else the clock's so far).
fn save_anchors_locked(s: &mut Spill, all: Option<&[Anchor]>) {
    let new: Vec<Anchor> = match all {
        Some(a) => a.get(s.anchors_saved..).unwrap_or_default().to_vec(),
        None => crate::clock::anchors_since(s.anchors_saved),
    };
    if new.is_empty() {
        return;
    }
    let mut rec = Vec::with_capacity(new.len() * 24);
    for a in &new {
        rec.extend_from_slice(&a.tick.to_le_bytes());
        rec.extend_from_slice(&a.ns.to_le_bytes());
        rec.extend_from_slice(&a.half_width.to_le_bytes());
    }
    if s.anchors.write_all(&rec).is_ok() {
        s.anchors_saved += new.len();
    }
}

/// Save the run's final anchors (finalize, after the clock's last one).
pub fn save_anchors(all: &[Anchor]) {
    if let Some(s) = lock().as_mut() {
        save_anchors_locked(s, Some(all));
    }
}

/// Record a region's name (cold path: at registration).
pub fn region_registered(id: u32, name: &str) {
    if let Some(s) = lock().as_mut() {
        let mut rec = Vec::with_capacity(8 + name.len());
        rec.extend_from_slice(&id.to_le_bytes());
        rec.extend_from_slice(&(name.len() as u32).to_le_bytes());
        rec.extend_from_slice(name.as_bytes());
        let _ = s.names.write_all(&rec);
    }
}

/// Record a recording thread (cold path: its first call).
pub fn thread_started(index: u32, os_tid: i64) {
    if let Some(s) = lock().as_mut() {
        let mut rec = [0u8; 16];
        rec[..4].copy_from_slice(&index.to_le_bytes());
        rec[8..].copy_from_slice(&os_tid.to_le_bytes());
        let _ = s.threads.write_all(&rec);
    }
}

/// A new chunk of `words` words in the spill file, mapped shared: (file offset, address).
/// None when the disk refuses the blocks: recording goes on in memory from here on.
pub fn map_chunk(words: usize) -> Option<(u64, *mut u64)> {
    let mut g = lock();
    let s = g.as_mut()?;
    save_anchors_locked(s, None);
    let bytes = words * 8;
    let off = s.end;
    let fd = s.calls.as_raw_fd();
    // SAFETY: plain system calls on our own descriptor.
    let rc = unsafe { libc::posix_fallocate(fd, off as libc::off_t, bytes as libc::off_t) };
    if rc != 0 {
        let why = std::io::Error::from_raw_os_error(rc);
        ACTIVE.store(false, Ordering::Release);
        warn::once(
            "spill-full",
            &format!("cannot grow the spill file in {} ({why}): recording goes on in memory; calls from now on survive only a normal end", s.dir.display()),
        );
        return None;
    }
    // SAFETY: mapping `bytes` bytes of our file at a page-aligned offset that now exists.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, off as libc::off_t) };
    if p == libc::MAP_FAILED {
        ACTIVE.store(false, Ordering::Release);
        warn::once("spill-map", &format!("cannot map the spill file ({}): recording goes on in memory", std::io::Error::last_os_error()));
        return None;
    }
    s.end += bytes as u64;
    s.chunks += 1;
    let mut allocated = [0u8; 16];
    allocated[..8].copy_from_slice(&s.end.to_le_bytes());
    allocated[8..].copy_from_slice(&s.chunks.to_le_bytes());
    let _ = s.calls.write_all_at(&allocated, ALLOCATED_AT);
    Some((off, p as *mut u64))
}

/// Unmap a chunk mapped by `map_chunk`.
///
/// # Safety
/// `base` and `words` must be those of a live mapping from `map_chunk`.
pub unsafe fn unmap_chunk(base: *mut u64, words: usize) {
    // SAFETY: per the contract.
    unsafe { libc::munmap(base.cast(), words * 8) };
}

pub fn map_reader(file: &File) -> Option<Mapping> {
    let len = file.metadata().ok()?.len() as usize;
    if len == 0 {
        return Some(Mapping { base: std::ptr::null(), len: 0 });
    }
    // SAFETY: a read-only shared mapping of a file we hold open.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    (p != libc::MAP_FAILED).then_some(Mapping { base: p as *const u8, len })
}

/// Map this process's spill file for reading (finalize: after every thread stopped), until
/// `finish`.
pub fn open_reader() {
    if !FINALIZE_READS.load(Ordering::Acquire) {
        std::mem::forget(READING.lock());
        FINALIZE_READS.store(true, Ordering::Release);
    }
    let m = lock().as_ref().and_then(|s| map_reader(&s.calls));
    *reader() = m;
}

/// A reading of another spill file's chunks (recovery): mapped until this is dropped, and no
/// other reading in the process meanwhile.
#[must_use = "the file is unmapped when the reading is dropped"]
pub struct Reading {
    _turn: parking_lot::MutexGuard<'static, ()>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        // Before the turn is given up (fields drop after this).
        *reader() = None;
    }
}

/// Map another spill file for reading its chunks (recovery), while the `Reading` lives.
pub fn read_file(file: &File) -> Reading {
    let turn = READING.lock();
    *reader() = map_reader(file);
    Reading { _turn: turn }
}

/// Finalize's reading ends (after the write).
fn close_reader() {
    *reader() = None;
    if FINALIZE_READS.swap(false, Ordering::AcqRel) {
        // SAFETY: the guard taken in `open_reader` was forgotten; this gives its turn back.
        unsafe { READING.force_unlock() };
    }
}

/// The words of the spilled chunk at `offset` after its first `skip` (its header; `words`
/// including them), from the reader's mapping: valid while its reading lasts. None without a
/// mapping or past its end.
pub fn spilled_words<'a>(offset: u64, skip: usize, words: usize) -> Option<&'a [u64]> {
    let g = reader();
    let m = g.as_ref()?;
    let start = offset as usize + skip * 8;
    let end = (offset as usize + words * 8).min(m.len & !7);
    if m.base.is_null() || start > end {
        return None;
    }
    // SAFETY: inside the mapping, 8-byte aligned (offsets are page multiples); the mapping
    // lives until its reading ends (a `Reading` dropped, or `finish`), which the callers let
    // happen only after the last cursor is gone; no other reading replaces it meanwhile.
    Some(unsafe { std::slice::from_raw_parts(m.base.add(start) as *const u64, (end - start) / 8) })
}

/// A spilled chunk was read: drop its pages from this process (they stay in the page cache
/// and the file), so that reading a long run keeps resident memory bounded.
pub fn release_words(offset: u64, words: usize) {
    let g = reader();
    if let Some(m) = g.as_ref().filter(|m| !m.base.is_null()) {
        let end = (offset as usize + words * 8).min(m.len);
        if (offset as usize) < end {
            // SAFETY: a page-aligned range of our read-only mapping.
            unsafe { libc::madvise(m.base.add(offset as usize) as *mut libc::c_void, end - offset as usize, libc::MADV_DONTNEED) };
        }
    }
}

/// Stop spilling. With `remove`, the run directory goes (the profile holds the calls).
pub fn finish(remove: bool) {
    ACTIVE.store(false, Ordering::Release);
    close_reader();
    if let Some(s) = lock().take() {
        if remove {
            remove_run_dir(&s.dir);
        }
    }
}

/// A raw dump of call logs in this format, written in one go (the write after a termination
/// signal: the calls at the speed the page cache takes them, before the profile is written in
/// its layout): a run directory like the flight recorder's, which `sptool recover` finds and
/// reads as one. `meta.json`, `names`, `threads` and `anchors` come first; `calls.spill`
/// records in its header the end and the number of chunks it will hold, so that a dump cut
/// short (the process killed during it) is counted as such by recovery, never taken as
/// complete. Chunks are written as recorded (8 bytes per packed call), each padded to whole
/// pages; no `fsync`: the page cache keeps what was written when the process is killed.
pub struct Dump {
    dir: PathBuf,
    calls: File,
    /// Where the next chunk goes, and where the last one ends.
    at: u64,
    end: u64,
    chunks: u64,
    written: u64,
}

/// What a chunk of `data_units` data units (4 bytes each) takes in a dump: its header and
/// data, in whole pages of 8-byte words.
pub fn dump_chunk_words(data_units: usize) -> usize {
    (CHUNK_HDR + data_units.div_ceil(2)).next_multiple_of(PAGE_WORDS)
}

/// Words of a chunk header (the call log's `HDR`; the storage only needs its size).
pub const CHUNK_HDR: usize = 4;

impl Dump {
    /// A new run directory for `meta` holding `names` (region id, name), `threads` (thread
    /// index, Linux thread id) and the clock's `anchors`, ready for `chunks` chunks of
    /// `words` words in all (as `dump_chunk_words` counts them).
    pub fn begin(
        meta: &SpillMeta,
        names: &[(u32, String)],
        threads: &[(u32, i64)],
        anchors: &[Anchor],
        chunks: u64,
        words: u64,
        made: &mut dyn FnMut(&Path),
    ) -> Result<Dump, String> {
        let dir = make_run_dir(meta)?;
        // Told at once, before its files are made: a write cut short from here on names it.
        made(&dir);
        let made = (|| -> std::io::Result<File> {
            let calls = create_files(&dir, meta)?;
            let mut rec = Vec::new();
            for (id, name) in names {
                rec.extend_from_slice(&id.to_le_bytes());
                rec.extend_from_slice(&(name.len() as u32).to_le_bytes());
                rec.extend_from_slice(name.as_bytes());
            }
            create_private(&dir.join(NAMES_FILE))?.write_all(&rec)?;
            rec.clear();
            for (index, tid) in threads {
                rec.extend_from_slice(&index.to_le_bytes());
                rec.extend_from_slice(&0u32.to_le_bytes());
                rec.extend_from_slice(&tid.to_le_bytes());
            }
            create_private(&dir.join(THREADS_FILE))?.write_all(&rec)?;
            rec.clear();
            for a in anchors {
                rec.extend_from_slice(&a.tick.to_le_bytes());
                rec.extend_from_slice(&a.ns.to_le_bytes());
                rec.extend_from_slice(&a.half_width.to_le_bytes());
            }
            create_private(&dir.join(ANCHORS_FILE))?.write_all(&rec)?;
            let end = HEADER_BYTES + words * 8;
            let mut allocated = [0u8; 16];
            allocated[..8].copy_from_slice(&end.to_le_bytes());
            allocated[8..].copy_from_slice(&chunks.to_le_bytes());
            calls.write_all_at(&allocated, ALLOCATED_AT)?;
            Ok(calls)
        })();
        match made {
            Ok(calls) => Ok(Dump { dir, calls, at: HEADER_BYTES, end: HEADER_BYTES + words * 8, chunks, written: 0 }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot create the dump files in {}: {e}", dir.display()))
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Append one chunk: `header` as the call log reads it (its capacity is replaced by the
    /// pages the chunk takes here), `data` its data units that hold calls.
    pub fn chunk(&mut self, mut header: [u64; CHUNK_HDR], data: &[u32]) -> std::io::Result<()> {
        let words = dump_chunk_words(data.len());
        if self.written >= self.chunks || self.at + words as u64 * 8 > self.end {
            return Err(std::io::Error::other("more chunks than the dump was begun for"));
        }
        header[1] = data.len() as u64;
        header[2] = (header[2] & 0xFFFF_FFFF) | (words as u64) << 32;
        let iov = [
            libc::iovec { iov_base: header.as_ptr() as *mut libc::c_void, iov_len: CHUNK_HDR * 8 },
            libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() * 4 },
        ];
        let want = CHUNK_HDR * 8 + data.len() * 4;
        // SAFETY: two buffers we hold for the call, written at an offset of our own file.
        let n = unsafe { libc::pwritev(self.calls.as_raw_fd(), iov.as_ptr(), 2, self.at as libc::off_t) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = n as usize;
        if n < want {
            // A short write (a signal, a full disk on the way): the rest as plain writes.
            fn bytes<T: Copy>(v: &[T]) -> &[u8] {
                // SAFETY: integers (plain old data), viewed as their bytes for the write.
                unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
            }
            let mut all = Vec::with_capacity(want);
            all.extend_from_slice(bytes(&header));
            all.extend_from_slice(bytes(data));
            self.calls.write_all_at(&all[n..], self.at + n as u64)?;
        }
        self.at += words as u64 * 8;
        self.written += 1;
        Ok(())
    }

    /// Every chunk is in: the file gets its full length (the last chunk's padding). Returns
    /// the bytes of the calls file.
    pub fn finish(&mut self) -> std::io::Result<u64> {
        self.calls.set_len(self.at)?;
        Ok(self.at)
    }

    /// Remove the dump (the profile in its layout holds everything now, or it is not wanted).
    pub fn remove(self) {
        remove_run_dir(&self.dir);
    }
}

/// Stop spilling in a forked child: it must not write into its parent's chunks.
pub fn forget_in_child() {
    ACTIVE.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw dump is named to its caller the moment its directory exists, before any of its
    /// files: a write cut short while they are made names it (see `signal_write`).
    #[test]
    fn a_dump_is_named_before_its_files_are_made() {
        let parent = std::env::temp_dir().join(format!("sp-dump-named.{}", std::process::id()));
        std::fs::create_dir_all(&parent).unwrap();
        let meta = SpillMeta {
            format_version: FORMAT_VERSION,
            pid: std::process::id() as i64,
            rank: None,
            size: None,
            target: parent.join("out.h5"),
            verbosity: 0,
            layout: "regions".into(),
            metadata: Vec::new(),
            full_metadata: false,
            info: RankInfo::default(),
            clock: "monotonic".into(),
            clock_note: None,
            boot_id: boot_id(),
            started: String::new(),
        };
        let mut told = Vec::new();
        let dump = Dump::begin(&meta, &[(0, "solve".into())], &[(0, 1)], &[], 0, 0, &mut |d| {
            told.push((d.to_path_buf(), d.is_dir(), std::fs::read_dir(d).map(|r| r.count()).unwrap_or(usize::MAX)));
        })
        .unwrap();
        assert_eq!(told.len(), 1, "{told:?}");
        let (dir, existed, entries) = told.pop().unwrap();
        assert_eq!(dir, dump.dir());
        assert!(existed && entries == 0, "told with the directory made and empty: {existed} {entries}");
        assert!(dir.join(META_FILE).is_file() && dir.join(NAMES_FILE).is_file(), "then its files are made");
        dump.remove();
        assert!(!dir.exists());
        let _ = std::fs::remove_dir_all(&parent);
    }
}
