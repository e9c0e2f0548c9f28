//! Reading HDF5 files that may be hostile: the one way sptool and the library's readers of
//! profiles (merging rank files, recovery's look at an existing profile) read HDF5. Everything
//! a file says is treated as hostile:
//! - names and strings are read as bytes and shown with invalid UTF-8 replaced (`U+FFFD`),
//!   never handed to Rust as `str` unchecked (the `hdf5` crate's name and string accessors do
//!   that, so they are not used for anything that comes from the file);
//! - every dataset's element count is checked against what the file really stores before
//!   anything is allocated ([`Dataset::check`]): uncompressed data must be stored in full,
//!   compressed data may expand at most [`MAX_EXPANSION`] times, no dataset may hold more than
//!   the file, strings are read in batches and their total is bounded by the file's size;
//! - links are followed only inside the file: external links, virtual datasets and datasets
//!   with external raw storage (which would make the HDF5 library open other files, FIFOs
//!   and devices included) are refused;
//! - one dataset reached under two names (hard links that would make a reader read the same
//!   data again and again) is refused as damage.
//!
//! The HDF5 library itself can still crash or loop on a damaged file: whoever reads a file a
//! user gave does it in a child process (`guard`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use hdf5_sys::h5::{H5_index_t, H5_iter_order_t, H5free_memory, herr_t, hsize_t};
use hdf5_sys::h5a::{H5Aclose, H5Aexists, H5Aget_space, H5Aget_storage_size, H5Aget_type, H5Aiterate2, H5A_info_t, H5Aopen, H5Aread};
use hdf5_sys::h5d::{H5Dget_create_plist, H5Dget_space, H5Dget_storage_size, H5Dget_type, H5Dopen2, H5Dread, H5Dvlen_reclaim};
use hdf5_sys::h5f::{H5F_ACC_RDONLY, H5Fopen};
use hdf5_sys::h5g::H5Gopen2;
use hdf5_sys::h5i::{H5I_type_t, H5Iget_type, hid_t};
use hdf5_sys::h5o::{H5Oclose, H5Oopen};
use hdf5_sys::h5l::{H5L_info1_t, H5Lexists, H5Lget_info1, H5Literate1};
use hdf5_sys::h5p::{H5P_CLS_DATASET_ACCESS, H5P_CLS_GROUP_ACCESS, H5P_DEFAULT, H5Pclose, H5Pcreate, H5Pget_chunk, H5Pget_external_count, H5Pget_layout, H5Pget_nfilters, H5Pset_elink_cb, H5Pset_nlinks};
use hdf5_sys::h5s::{H5S_ALL, H5S_class_t, H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sget_simple_extent_dims, H5Sget_simple_extent_ndims, H5Sget_simple_extent_type, H5Sselect_hyperslab};
use hdf5_sys::h5t::{H5T_class_t, H5T_direction_t, H5T_sign_t, H5Tclose, H5Tget_class, H5Tget_member_name, H5Tget_native_type, H5Tget_nmembers, H5Tget_sign, H5Tget_size, H5Tis_variable_str};


/// A failure to read: a message, optionally about one file, shown on one line as
/// `FILE: what is wrong`.
#[derive(Debug)]
pub struct Error {
    file: Option<PathBuf>,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error not tied to a file.
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

    /// What is wrong, without the file.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    text.split('\n').map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join("; ")
}

/// One-line summary of an HDF5 library error. Its text may quote names from the file, so
/// invalid UTF-8 in it is replaced.
pub fn h5(err: &hdf5::Error) -> String {
    one_line(&String::from_utf8_lossy(err.to_string().as_bytes()))
}

/// An HDF5 attribute value, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    IntArray(Vec<i64>),
    UIntArray(Vec<u64>),
    FloatArray(Vec<f64>),
    BoolArray(Vec<bool>),
    StrArray(Vec<String>),
    /// A type that is not decoded; the text names the type.
    Other(String),
}

pub type Attrs = Vec<(String, AttrValue)>;

impl AttrValue {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(*v),
            Self::UInt(v) => i64::try_from(*v).ok(),
            Self::IntArray(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            Self::StrArray(v) if v.len() == 1 => Some(&v[0]),
            _ => None,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let float = |v: f64| serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
        match self {
            Self::Int(v) => Value::from(*v),
            Self::UInt(v) => Value::from(*v),
            Self::Float(v) => float(*v),
            Self::Bool(v) => Value::from(*v),
            Self::Str(v) | Self::Other(v) => Value::from(v.as_str()),
            Self::IntArray(v) => Value::from(v.clone()),
            Self::UIntArray(v) => Value::from(v.clone()),
            Self::FloatArray(v) => Value::Array(v.iter().map(|x| float(*x)).collect()),
            Self::BoolArray(v) => Value::from(v.clone()),
            Self::StrArray(v) => Value::from(v.clone()),
        }
    }
}

fn join_values<T: std::fmt::Display>(f: &mut std::fmt::Formatter<'_>, values: &[T]) -> std::fmt::Result {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

impl std::fmt::Display for AttrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Int(v) => write!(f, "{v}"),
            Self::UInt(v) => write!(f, "{v}"),
            Self::Float(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::Str(v) => f.write_str(v),
            Self::Other(v) => write!(f, "<{v}>"),
            Self::IntArray(v) => join_values(f, v),
            Self::UIntArray(v) => join_values(f, v),
            Self::FloatArray(v) => join_values(f, v),
            Self::BoolArray(v) => join_values(f, v),
            Self::StrArray(v) => join_values(f, v),
        }
    }
}


const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Compressed data may decompress to at most this many times its stored size: a little above
/// deflate's limit (about 1032:1), the best ratio of the filters the writers use.
pub const MAX_EXPANSION: u64 = 1100;
/// Largest chunk the HDF5 library may decompress at once (it allocates whole chunks).
pub const MAX_CHUNK_BYTES: u64 = 256 << 20;
/// Strings are read at most this many at a time ...
const STRING_BATCH: u64 = 1 << 16;
/// ... and fixed-length ones at most this many bytes at a time.
const STRING_BATCH_BYTES: u64 = 8 << 20;
/// Groups nested inside one another, at most, in a tree that is checked whole.
pub const MAX_TREE_DEPTH: usize = 32;
/// Soft links followed in a row, at most.
const MAX_SOFT_LINKS: usize = 8;

/// Run HDF5 calls under the `hdf5` crate's lock (which also initializes the library and
/// keeps it from printing its error stacks).
fn sync<T>(f: impl FnOnce() -> T) -> T {
    hdf5::sync::sync(f)
}

/// The HDF5 library's account of the last failed call, on one line, invalid UTF-8 replaced
/// (its messages may quote names from the file): `function(): outermost: innermost`.
fn last_error() -> String {
    use hdf5_sys::h5e::{H5E_direction_t, H5E_error2_t, H5Eclose_stack, H5Eget_current_stack, H5Ewalk2};
    unsafe extern "C" fn collect(_n: c_uint, e: *const H5E_error2_t, data: *mut c_void) -> herr_t {
        // SAFETY: HDF5 passes a valid frame (NUL-terminated strings or NULL) and our Vec.
        unsafe {
            let text = |p: *const c_char| if p.is_null() { String::new() } else { lossy(CStr::from_ptr(p).to_bytes()) };
            (*(data as *mut Vec<(String, String)>)).push((text((*e).func_name), text((*e).desc)));
        }
        0
    }
    let mut frames: Vec<(String, String)> = Vec::new();
    sync(|| unsafe {
        let stack = H5Eget_current_stack();
        if stack >= 0 {
            H5Ewalk2(stack, H5E_direction_t::H5E_WALK_DOWNWARD, Some(collect), &mut frames as *mut _ as *mut c_void);
            H5Eclose_stack(stack);
        }
    });
    let text = match &frames[..] {
        [] => "unknown HDF5 error".to_string(),
        [(func, desc)] => format!("{func}(): {desc}"),
        [(func, desc), .., (_, last)] => format!("{func}(): {desc}: {last}"),
    };
    one_line(&text)
}

/// Text from bytes a file gave us: invalid UTF-8 replaced, never trusted.
pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether the process's address space is far below its limit (`RLIMIT_AS`, which the tools
/// set): more than twice `MAX_CHUNK_BYTES` left (a chunk and its compressed copy, the most the
/// HDF5 library allocates at once for an intact file), and no more than half of it in use.
/// False without a limit, or when the use cannot be read (then the machine itself may be out
/// of memory: the failure is said as such).
fn far_from_memory_limit() -> bool {
    // SAFETY: a zeroed rlimit is a valid out-buffer.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return false;
    }
    // The first field of /proc/self/statm: the address space in use, in pages.
    let pages = std::fs::read_to_string("/proc/self/statm").ok().and_then(|s| s.split_whitespace().next().and_then(|p| p.parse::<u64>().ok()));
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let Some(used) = pages.and_then(|p| p.checked_mul(page)) else { return false };
    let limit = lim.rlim_cur as u64;
    used <= limit / 2 && limit - used > 2 * MAX_CHUNK_BYTES
}

fn damaged(path: &str, what: impl std::fmt::Display) -> Error {
    Error::new(format!("is damaged: {} {what}", if path.is_empty() { "the root group" } else { path }))
}

/// Closes an HDF5 id of any kind when dropped.
struct Id(hid_t, unsafe extern "C" fn(hid_t) -> herr_t);

impl Id {
    fn new(id: hid_t, close: unsafe extern "C" fn(hid_t) -> herr_t) -> Option<Id> {
        (id >= 0).then_some(Id(id, close))
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: the id was returned open by the HDF5 library and is closed once.
        sync(|| unsafe { (self.1)(self.0) });
    }
}

/// External links are never followed: their target may be any file, a FIFO that blocks
/// forever or a device.
extern "C" fn refuse_external_link(
    _parent_file: *const c_char,
    _parent_group: *const c_char,
    _child_file: *const c_char,
    _child_object: *const c_char,
    _flags: *mut c_uint,
    _fapl: hid_t,
    _data: *mut c_void,
) -> herr_t {
    -1
}

/// What all objects of one open file share.
struct FileState {
    /// Bytes on disk (the real size, not what the superblock claims).
    size: u64,
    /// Access property lists for groups and datasets: no external links, few soft links.
    gapl: Id,
    dapl: Id,
    /// Datasets read so far: object address -> the name it was read under.
    datasets: RefCell<HashMap<String, String>>,
}

fn access_plist(class: hid_t) -> Result<Id> {
    sync(|| unsafe {
        let id = Id::new(H5Pcreate(class), H5Pclose).ok_or_else(|| Error::new(format!("cannot set up HDF5: {}", last_error())))?;
        if H5Pset_elink_cb(id.0, Some(refuse_external_link), std::ptr::null_mut()) < 0 || H5Pset_nlinks(id.0, MAX_SOFT_LINKS) < 0 {
            return Err(Error::new(format!("cannot set up HDF5: {}", last_error())));
        }
        Ok(id)
    })
}

/// A group (or the root group of a file) of an open file.
pub struct Group {
    inner: hdf5::Location,
    path: String,
    state: Rc<FileState>,
}

/// An open file: its root group.
pub type File = Group;

/// One link of a group: its name as stored (to open it) and as shown.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    raw: CString,
}

/// Does the file carry the HDF5 signature at offset 0, 512, 1024, ...?
fn has_hdf5_signature(file: &std::fs::File, size: u64) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let mut offset = 0u64;
    let mut buf = [0u8; 8];
    while offset + 8 <= size {
        file.read_exact_at(&mut buf, offset)?;
        if &buf == SIGNATURE {
            return Ok(true);
        }
        offset = if offset == 0 { 512 } else { offset * 2 };
    }
    Ok(false)
}

/// Open `path` read-only, telling a missing file, a file that is not HDF5
/// and a damaged or truncated HDF5 file apart. Returns the file and its size.
pub fn open(path: &Path) -> Result<(File, u64)> {
    open_as(path, path)
}

/// [`open`] a file that is shown to the user as `shown` (`path` may be a `/proc/self/fd/N`
/// name for a file opened safely before).
pub fn open_as(path: &Path, shown: &Path) -> Result<(File, u64)> {
    crate::guard::note_input(shown);
    open_noted(path).map_err(|e| Error { file: Some(shown.to_path_buf()), ..e })
}

fn open_noted(path: &Path) -> Result<(File, u64)> {
    // Opened the one safe way (type checked before and after a non-blocking open): a FIFO,
    // socket, device or directory is refused here and never reaches HDF5, which would block
    // in open(2) on a FIFO.
    let opened = safe_file::open_regular(path).map_err(|e| match (e.kind(), safe_file::not_kind(&e)) {
        (_, Some((_, true))) => Error::in_file(path, "is a directory, not an HDF5 file"),
        (_, Some((is, false))) => Error::in_file(path, format!("is not a regular file ({is}), not an HDF5 file")),
        (std::io::ErrorKind::NotFound, _) => Error::in_file(path, "no such file"),
        (std::io::ErrorKind::PermissionDenied, _) => Error::in_file(path, "permission denied"),
        _ => Error::in_file(path, format!("cannot access the file: {e}")),
    })?;
    let size = opened.metadata().map_err(|e| Error::in_file(path, format!("cannot access the file: {e}")))?.len();
    if size == 0 {
        return Err(Error::in_file(path, "is empty (0 bytes), not an HDF5 file"));
    }
    let signed = has_hdf5_signature(&opened, size).map_err(|e| Error::in_file(path, format!("cannot read the file: {e}")))?;
    if !signed {
        return Err(Error::in_file(path, "is not an HDF5 file (no HDF5 signature); only scope_profiler .h5 files are read"));
    }
    // HDF5 opens by name: give it the name of the very file checked above (where /proc is
    // mounted), so that nothing put in its place since can be opened instead.
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&opened)));
    let name = if by_fd.exists() { by_fd } else { path.to_path_buf() };
    let cpath = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()))
        .map_err(|_| Error::in_file(path, "the file name contains a NUL byte"))?;
    let id = sync(|| unsafe { H5Fopen(cpath.as_ptr(), H5F_ACC_RDONLY, H5P_DEFAULT) });
    if id < 0 {
        let detail = last_error().replace(&*name.to_string_lossy(), &path.to_string_lossy());
        let what = if detail.contains("truncated") {
            "is a truncated HDF5 file (was the run killed while writing?)"
        } else {
            "is a damaged HDF5 file that the HDF5 library cannot open"
        };
        return Err(Error::in_file(path, format!("{what}: {detail}")));
    }
    // SAFETY: a file id we own; the Location closes it.
    let inner = unsafe { hdf5::from_id::<hdf5::Location>(id) }.map_err(|e| Error::in_file(path, h5(&e)))?;
    let state = Rc::new(FileState {
        size,
        gapl: access_plist(*H5P_CLS_GROUP_ACCESS).map_err(|e| e.or_file(path))?,
        dapl: access_plist(*H5P_CLS_DATASET_ACCESS).map_err(|e| e.or_file(path))?,
        datasets: RefCell::new(HashMap::new()),
    });
    Ok((Group { inner, path: String::new(), state }, size))
}

fn cname(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::new(format!("the name {name:?} contains a NUL byte")))
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_string() } else { format!("{parent}/{name}") }
}

/// Link type codes (`H5L_type_t`), read as plain integers: a file may hold any of 0..=255.
const LINK_HARD: c_int = 0;
const LINK_SOFT: c_int = 1;
const LINK_EXTERNAL: c_int = 64;

impl Group {
    /// The group's name in the file (`rank0/regions`), as shown to users.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The open group, for copying it whole (`hdf5::Location::copy_to`) once
    /// [`Group::check_tree`] has passed.
    pub fn location(&self) -> &hdf5::Location {
        &self.inner
    }

    /// Check everything under this group before it is copied whole (`H5Ocopy`, which follows
    /// what the file says): every link leads inside the file (external and user-defined links
    /// are refused; soft links are copied as links, never followed), every dataset passes the
    /// checks of a read ([`Dataset::check`]: its size against what the file stores, no
    /// external or virtual storage), no group or dataset is reached twice (a group linked into
    /// itself), and groups nest at most [`MAX_TREE_DEPTH`] deep.
    pub fn check_tree(&self) -> Result<()> {
        self.check_tree_at(0, &mut std::collections::HashSet::new())
    }

    fn check_tree_at(&self, depth: usize, seen: &mut std::collections::HashSet<String>) -> Result<()> {
        if depth > MAX_TREE_DEPTH {
            return Err(damaged(&self.path, format_args!("nests groups more than {MAX_TREE_DEPTH} deep")));
        }
        let key = format!("{:?}", self.inner.loc_info().map(|i| i.token).map_err(|e| Error::new(h5(&e)))?);
        if !seen.insert(key) {
            return Err(damaged(&self.path, "is reached twice (a group linked into itself or twice)"));
        }
        for (bytes, kind) in self.links()? {
            let name = lossy(&bytes);
            let path = join(&self.path, &name);
            match kind {
                LINK_HARD => {}
                LINK_SOFT => continue,
                LINK_EXTERNAL => return Err(damaged(&path, "is an external link to another file; links out of the file are not followed")),
                other => return Err(damaged(&path, format_args!("is a link of an unknown type ({other})"))),
            }
            let raw = CString::new(bytes).map_err(|_| damaged(&path, "has a name with a NUL byte"))?;
            let id = sync(|| unsafe { H5Oopen(self.inner.id(), raw.as_ptr(), self.state.gapl.0) });
            if id < 0 {
                return Err(self.open_error(&raw, &path));
            }
            let kind = sync(|| unsafe { H5Iget_type(id) });
            sync(|| unsafe { H5Oclose(id) });
            match kind {
                H5I_type_t::H5I_GROUP => self.open_raw(&raw, &name)?.check_tree_at(depth + 1, seen)?,
                H5I_type_t::H5I_DATASET => {
                    self.dataset_raw(&raw, path)?.check()?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every link of the group, with its type (`LINK_*`), in name order.
    fn links(&self) -> Result<Vec<(Vec<u8>, c_int)>> {
        unsafe extern "C" fn collect(_g: hid_t, name: *const c_char, info: *const H5L_info1_t, data: *mut c_void) -> herr_t {
            // SAFETY: HDF5 passes a NUL-terminated name, the link's info and our Vec.
            unsafe {
                let out = &mut *(data as *mut Vec<(Vec<u8>, c_int)>);
                // The type is read as an integer: user-defined link types are not enum values.
                let kind = std::ptr::read(std::ptr::addr_of!((*info).type_) as *const c_int);
                out.push((CStr::from_ptr(name).to_bytes().to_vec(), kind));
            }
            0
        }
        let mut out: Vec<(Vec<u8>, c_int)> = Vec::new();
        #[allow(deprecated)]
        let rc = sync(|| unsafe {
            H5Literate1(
                self.inner.id(),
                H5_index_t::H5_INDEX_NAME,
                H5_iter_order_t::H5_ITER_INC,
                std::ptr::null_mut(),
                Some(collect),
                &mut out as *mut _ as *mut c_void,
            )
        });
        if rc < 0 {
            return Err(Error::new(format!("cannot list {}: {}", self.shown(), last_error())));
        }
        Ok(out)
    }

    fn shown(&self) -> &str {
        if self.path.is_empty() { "the root group" } else { &self.path }
    }

    /// Whether the group holds no link at all.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.links()?.is_empty())
    }

    /// The subgroups of the group, in name order. Datasets and dangling soft links are
    /// skipped; an external link, or a group linked twice, is an error.
    pub fn subgroups(&self) -> Result<Vec<Member>> {
        let mut out = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (bytes, kind) in self.links()? {
            let name = lossy(&bytes);
            let Ok(raw) = CString::new(bytes) else { continue };
            match kind {
                LINK_HARD | LINK_SOFT => {}
                LINK_EXTERNAL => {
                    return Err(damaged(
                        &join(&self.path, &name),
                        "is an external link to another file; links out of the file are not followed",
                    ));
                }
                _ => continue, // user-defined link types: nothing a profile has
            }
            let member = Member { name, raw };
            // Open to learn whether it is a group (a soft link may dangle: skipped).
            let Ok(group) = self.open_member(&member) else { continue };
            let key = format!("{:?}", group.inner.loc_info().map(|i| i.token).map_err(|e| Error::new(h5(&e)))?);
            if let Some(first) = seen.insert(key, member.name.clone()) {
                return Err(damaged(&join(&self.path, &member.name), format_args!("is the same group as {}", join(&self.path, &first))));
            }
            out.push(member);
        }
        Ok(out)
    }

    fn open_member(&self, member: &Member) -> Result<Group> {
        self.open_raw(&member.raw, &member.name)
    }

    /// Why `raw` could not be opened: an external link (never followed), or the HDF5 library's
    /// account.
    fn open_error(&self, raw: &CStr, path: &str) -> Error {
        let detail = last_error();
        let mut info: H5L_info1_t = unsafe { std::mem::zeroed() };
        #[allow(deprecated)]
        let rc = sync(|| unsafe { H5Lget_info1(self.inner.id(), raw.as_ptr(), &mut info, self.state.gapl.0) });
        // SAFETY: the type is read as an integer (user-defined types are not enum values).
        let kind = unsafe { std::ptr::read(std::ptr::addr_of!(info.type_) as *const c_int) };
        if rc >= 0 && kind == LINK_EXTERNAL {
            return damaged(path, "is an external link to another file; links out of the file are not followed");
        }
        Error::new(format!("cannot open {path}: {detail}"))
    }

    fn open_raw(&self, raw: &CStr, name: &str) -> Result<Group> {
        let path = join(&self.path, name);
        let id = sync(|| unsafe { H5Gopen2(self.inner.id(), raw.as_ptr(), self.state.gapl.0) });
        if id < 0 {
            return Err(self.open_error(raw, &path));
        }
        // SAFETY: a group id we own.
        let inner = unsafe { hdf5::from_id::<hdf5::Location>(id) }.map_err(|e| Error::new(format!("cannot open {path}: {}", h5(&e))))?;
        Ok(Group { inner, path, state: self.state.clone() })
    }

    /// Open a subgroup listed by [`Group::subgroups`].
    pub fn member(&self, member: &Member) -> Result<Group> {
        self.open_member(member)
    }

    /// Open the group `name` (a name or a relative path of names).
    pub fn group(&self, name: &str) -> Result<Group> {
        self.open_raw(&cname(name)?, name)
    }

    /// Does the group have a link `name` that leads somewhere inside the file?
    pub fn has(&self, name: &str) -> bool {
        let Ok(c) = cname(name) else { return false };
        sync(|| unsafe { H5Lexists(self.inner.id(), c.as_ptr(), self.state.gapl.0) }) > 0
    }

    /// Open dataset `name`, with an error naming it.
    pub fn dataset(&self, name: &str) -> Result<Dataset> {
        let path = join(&self.path, name);
        if !self.has(name) {
            return Err(Error::new(format!("{path} is missing")));
        }
        self.dataset_raw(&cname(name)?, path)
    }

    fn dataset_raw(&self, c: &CStr, path: String) -> Result<Dataset> {
        let id = sync(|| unsafe { H5Dopen2(self.inner.id(), c.as_ptr(), self.state.dapl.0) });
        if id < 0 {
            return Err(self.open_error(c, &path));
        }
        // SAFETY: a dataset id we own.
        let inner = unsafe { hdf5::from_id::<hdf5::Location>(id) }.map_err(|e| Error::new(format!("cannot open {path}: {}", h5(&e))))?;
        let token = inner.loc_info().map(|i| format!("{:?}", i.token)).map_err(|e| Error::new(format!("cannot open {path}: {}", h5(&e))))?;
        {
            let mut seen = self.state.datasets.borrow_mut();
            match seen.get(&token) {
                Some(first) if *first != path => {
                    return Err(damaged(&path, format_args!("is the same dataset as {first} (linked twice)")));
                }
                Some(_) => {}
                None => {
                    seen.insert(token, path.clone());
                }
            }
        }
        Ok(Dataset { inner, path, size: self.state.size })
    }

    /// Names of the group's attributes, in name order (invalid UTF-8 replaced), with the
    /// names as stored.
    fn attr_names(&self) -> Result<Vec<(String, CString)>> {
        unsafe extern "C" fn collect(_l: hid_t, name: *const c_char, _info: *const H5A_info_t, data: *mut c_void) -> herr_t {
            // SAFETY: HDF5 passes a NUL-terminated name and our Vec.
            unsafe { (*(data as *mut Vec<CString>)).push(CStr::from_ptr(name).to_owned()) };
            0
        }
        let mut out: Vec<CString> = Vec::new();
        let rc = sync(|| unsafe {
            H5Aiterate2(
                self.inner.id(),
                H5_index_t::H5_INDEX_NAME,
                H5_iter_order_t::H5_ITER_INC,
                std::ptr::null_mut(),
                Some(collect),
                &mut out as *mut _ as *mut c_void,
            )
        });
        if rc < 0 {
            return Err(Error::new(format!("cannot list the attributes of {}: {}", self.shown(), last_error())));
        }
        Ok(out.into_iter().map(|c| (lossy(c.to_bytes()), c)).collect())
    }

    fn read_attr_raw(&self, raw: &CStr) -> std::result::Result<AttrValue, String> {
        let aid = sync(|| unsafe { H5Aopen(self.inner.id(), raw.as_ptr(), H5P_DEFAULT) });
        let attr = Id::new(aid, H5Aclose).ok_or_else(last_error)?;
        read_attr(&attr, self.state.size)
    }

    /// Every attribute, in name order. One that cannot be decoded is kept, described as `Other`.
    pub fn attrs(&self) -> Result<Attrs> {
        let mut out = Vec::new();
        for (name, raw) in self.attr_names()? {
            let value = self.read_attr_raw(&raw).unwrap_or_else(|e| AttrValue::Other(format!("unreadable: {e}")));
            out.push((name, value));
        }
        Ok(out)
    }

    /// The attribute `name`, if present and readable.
    pub fn attr(&self, name: &str) -> Option<AttrValue> {
        let c = cname(name).ok()?;
        if sync(|| unsafe { H5Aexists(self.inner.id(), c.as_ptr()) }) <= 0 {
            return None;
        }
        self.read_attr_raw(&c).ok()
    }

    pub fn attr_i64(&self, name: &str) -> Option<i64> {
        self.attr(name)?.as_i64()
    }

    pub fn attr_f64(&self, name: &str) -> Option<f64> {
        match self.attr(name)? {
            AttrValue::Float(v) => Some(v),
            AttrValue::FloatArray(v) if v.len() == 1 => Some(v[0]),
            other => other.as_i64().map(|v| v as f64),
        }
    }

    pub fn attr_string(&self, name: &str) -> Option<String> {
        self.attr(name).and_then(|v| v.as_str().map(str::to_string))
    }

    /// A list-of-strings attribute; a scalar string counts as a one-item list.
    pub fn attr_strings(&self, name: &str) -> Option<Vec<String>> {
        match self.attr(name)? {
            AttrValue::StrArray(v) => Some(v),
            AttrValue::Str(s) => Some(vec![s]),
            _ => None,
        }
    }

    /// A whole integer dataset, converted to `i64`.
    pub fn read_i64(&self, name: &str) -> Result<Vec<i64>> {
        self.dataset(name)?.read_i64()
    }

    /// A whole floating-point dataset, converted to `f64`.
    pub fn read_f64(&self, name: &str) -> Result<Vec<f64>> {
        self.dataset(name)?.read_f64()
    }

    /// A whole dataset with its shape.
    pub fn read_f64_shaped(&self, name: &str) -> Result<(Vec<f64>, Vec<usize>)> {
        let ds = self.dataset(name)?;
        let shape = ds.shape()?;
        Ok((ds.read_f64()?, shape))
    }

    /// A whole string dataset.
    pub fn read_strings(&self, name: &str) -> Result<Vec<String>> {
        self.dataset(name)?.read_strings()
    }
}

/// What kind of values a dataset or attribute holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Int { signed: bool },
    Float,
    VarString,
    FixedString(usize),
    Bool { size: usize },
    Other(&'static str),
}

/// Classify a datatype without decoding any name it carries (compound members, enum
/// values), except for telling a boolean enum (FALSE, TRUE) apart.
fn classify(ty: hid_t) -> Class {
    sync(|| unsafe {
        let size = H5Tget_size(ty);
        match H5Tget_class(ty) {
            H5T_class_t::H5T_INTEGER => Class::Int { signed: H5Tget_sign(ty) != H5T_sign_t::H5T_SGN_NONE },
            H5T_class_t::H5T_FLOAT => Class::Float,
            H5T_class_t::H5T_STRING => {
                if H5Tis_variable_str(ty) > 0 {
                    Class::VarString
                } else {
                    Class::FixedString(size)
                }
            }
            H5T_class_t::H5T_ENUM => {
                let member = |i: c_uint| {
                    let p = H5Tget_member_name(ty, i);
                    if p.is_null() {
                        return Vec::new();
                    }
                    let name = CStr::from_ptr(p).to_bytes().to_vec();
                    H5free_memory(p as *mut c_void);
                    name
                };
                if H5Tget_nmembers(ty) == 2 && member(0) == b"FALSE" && member(1) == b"TRUE" && (1..=8).contains(&size) {
                    Class::Bool { size }
                } else {
                    Class::Other("enum")
                }
            }
            H5T_class_t::H5T_TIME => Class::Other("time"),
            H5T_class_t::H5T_BITFIELD => Class::Other("bitfield"),
            H5T_class_t::H5T_OPAQUE => Class::Other("opaque"),
            H5T_class_t::H5T_COMPOUND => Class::Other("compound"),
            H5T_class_t::H5T_REFERENCE => Class::Other("reference"),
            H5T_class_t::H5T_VLEN => Class::Other("variable-length sequence"),
            H5T_class_t::H5T_ARRAY => Class::Other("array"),
            _ => Class::Other("unknown type"),
        }
    })
}

/// The shape of a dataspace; a scalar has shape `[]` and one element.
fn space_shape(space: hid_t) -> std::result::Result<(Vec<u64>, bool), String> {
    sync(|| unsafe {
        match H5Sget_simple_extent_type(space) {
            H5S_class_t::H5S_SCALAR => return Ok((Vec::new(), true)),
            H5S_class_t::H5S_NULL => return Ok((vec![0], false)),
            H5S_class_t::H5S_SIMPLE => {}
            _ => return Err(last_error()),
        }
        let rank = H5Sget_simple_extent_ndims(space);
        if !(0..=32).contains(&rank) {
            return Err(format!("a dataspace of rank {rank}"));
        }
        let mut dims = vec![0 as hsize_t; rank as usize];
        if H5Sget_simple_extent_dims(space, dims.as_mut_ptr(), std::ptr::null_mut()) < 0 {
            return Err(last_error());
        }
        Ok((dims, false))
    })
}

/// Elements of a shape, or None if the count does not fit in 64 bits.
fn count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

fn native(ty: hid_t) -> std::result::Result<Id, String> {
    Id::new(sync(|| unsafe { H5Tget_native_type(ty, H5T_direction_t::H5T_DIR_DEFAULT) }), H5Tclose).ok_or_else(last_error)
}

/// Split fixed-length string elements at their first NUL.
fn split_fixed(buf: &[u8], size: usize, out: &mut Vec<String>) {
    for item in buf.chunks(size.max(1)) {
        let end = item.iter().position(|&b| b == 0).unwrap_or(item.len());
        out.push(lossy(&item[..end]));
    }
}

/// Copy out and free variable-length strings that HDF5 allocated.
///
/// SAFETY: `ptrs` was filled by H5Aread/H5Dread with memory type `memtype` over `space`.
unsafe fn take_var_strings(ptrs: &mut [*mut c_char], memtype: hid_t, space: hid_t, out: &mut Vec<String>) {
    for &p in ptrs.iter() {
        // SAFETY: each pointer is NULL or a NUL-terminated string allocated by HDF5.
        out.push(if p.is_null() { String::new() } else { lossy(unsafe { CStr::from_ptr(p) }.to_bytes()) });
    }
    #[allow(deprecated)]
    // SAFETY: the buffer holds what the read put there, freed once.
    sync(|| unsafe { H5Dvlen_reclaim(memtype, space, H5P_DEFAULT, ptrs.as_mut_ptr() as *mut c_void) });
}

/// Read one attribute. Sizes are checked against the file before anything is allocated.
fn read_attr(attr: &Id, file_size: u64) -> std::result::Result<AttrValue, String> {
    let ty = Id::new(sync(|| unsafe { H5Aget_type(attr.0) }), H5Tclose).ok_or_else(last_error)?;
    let space = Id::new(sync(|| unsafe { H5Aget_space(attr.0) }), H5Sclose).ok_or_else(last_error)?;
    let (dims, scalar) = space_shape(space.0)?;
    let n = count(&dims).ok_or("a dataspace too large to count")?;
    let class = classify(ty.0);
    let elem = sync(|| unsafe { H5Tget_size(ty.0) }) as u64;
    let stored = sync(|| unsafe { H5Aget_storage_size(attr.0) });
    let bytes = n.checked_mul(elem.max(1)).ok_or("a size too large to count")?;
    if bytes > file_size || stored > file_size {
        return Err(format!("claims {bytes} bytes of data in a file of {file_size} bytes (damaged)"));
    }
    let n = n as usize;
    fn pick<T>(mut v: Vec<T>, scalar: bool, one: fn(T) -> AttrValue, many: fn(Vec<T>) -> AttrValue) -> AttrValue {
        if scalar && v.len() == 1 { one(v.remove(0)) } else { many(v) }
    }
    fn read_into<T: Copy>(attr: hid_t, memtype: hid_t, n: usize, zero: T) -> std::result::Result<Vec<T>, String> {
        let mut v = vec![zero; n];
        if n > 0 && sync(|| unsafe { H5Aread(attr, memtype, v.as_mut_ptr() as *mut c_void) }) < 0 {
            return Err(last_error());
        }
        Ok(v)
    }
    use hdf5_sys::h5t::{H5T_NATIVE_DOUBLE, H5T_NATIVE_INT64, H5T_NATIVE_UINT64};
    Ok(match class {
        Class::Int { signed: true } => pick(read_into(attr.0, sync(|| *H5T_NATIVE_INT64), n, 0i64)?, scalar, AttrValue::Int, AttrValue::IntArray),
        Class::Int { signed: false } => pick(read_into(attr.0, sync(|| *H5T_NATIVE_UINT64), n, 0u64)?, scalar, AttrValue::UInt, AttrValue::UIntArray),
        Class::Float => pick(read_into(attr.0, sync(|| *H5T_NATIVE_DOUBLE), n, 0f64)?, scalar, AttrValue::Float, AttrValue::FloatArray),
        Class::Bool { .. } => {
            let memtype = native(ty.0)?;
            let size = sync(|| unsafe { H5Tget_size(memtype.0) }).clamp(1, 8);
            let raw: Vec<u8> = read_into(attr.0, memtype.0, n * size, 0u8)?;
            pick(raw.chunks(size).map(|c| c.iter().any(|&b| b != 0)).collect(), scalar, AttrValue::Bool, AttrValue::BoolArray)
        }
        Class::FixedString(_) => {
            let memtype = native(ty.0)?;
            let size = sync(|| unsafe { H5Tget_size(memtype.0) }).max(1);
            if (n as u64).saturating_mul(size as u64) > file_size {
                return Err(format!("claims {n} strings of {size} bytes in a file of {file_size} bytes (damaged)"));
            }
            let raw: Vec<u8> = read_into(attr.0, memtype.0, n * size, 0u8)?;
            let mut v = Vec::with_capacity(n);
            split_fixed(&raw, size, &mut v);
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        Class::VarString => {
            let memtype = native(ty.0)?;
            let mut ptrs: Vec<*mut c_char> = vec![std::ptr::null_mut(); n];
            if n > 0 && sync(|| unsafe { H5Aread(attr.0, memtype.0, ptrs.as_mut_ptr() as *mut c_void) }) < 0 {
                return Err(last_error());
            }
            let mut v = Vec::with_capacity(n);
            // SAFETY: filled by H5Aread with this memory type over the attribute's space.
            unsafe { take_var_strings(&mut ptrs, memtype.0, space.0, &mut v) };
            let total: u64 = v.iter().map(|s| s.len() as u64).sum();
            if total > file_size {
                return Err(format!("holds {total} bytes of text in a file of {file_size} bytes (damaged)"));
            }
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        Class::Other(kind) => AttrValue::Other(kind.to_string()),
    })
}

/// An open dataset.
pub struct Dataset {
    inner: hdf5::Location,
    path: String,
    size: u64,
}

/// Shape and storage of a dataset, checked.
struct Extent {
    dims: Vec<u64>,
    n: u64,
    class: Class,
}

impl Dataset {
    fn error(&self, what: impl std::fmt::Display) -> Error {
        let what = what.to_string();
        // HDF5 reports its own failed allocations (a filter's output buffer, a chunk cache)
        // as an error, not through our allocator: the same out-of-memory line as any allocation.
        if what.contains("memory allocation failed") || what.contains("can't allocate") || what.contains("unable to allocate") {
            // Far from the address-space limit, only a size the file made up asks for that
            // much at once (whatever an intact file needs of the library at a time is a chunk
            // or a batch, bounded by `check`): damage, which more memory would not read.
            if far_from_memory_limit() {
                return damaged(&self.path, format_args!("makes the HDF5 library ask for more memory than its data can need ({what})"));
            }
            let env = crate::guard::tool().memory_env;
            let hint = if env.is_empty() { String::new() } else { format!("; set {env} to allow more") };
            return Error::new(format!("out of memory: HDF5 could not allocate what reading {} needs ({what}){hint}", self.path));
        }
        Error::new(format!("cannot read {}: {what}", self.path))
    }

    /// The dataset's shape, its type, and the check that reading it all is bounded by what
    /// the file really stores (see the module documentation).
    fn check(&self) -> Result<Extent> {
        let id = self.inner.id();
        let space = Id::new(sync(|| unsafe { H5Dget_space(id) }), H5Sclose).ok_or_else(|| self.error(last_error()))?;
        let (dims, scalar) = space_shape(space.0).map_err(|e| self.error(e))?;
        let dims = if scalar { vec![1] } else { dims };
        let n = count(&dims).ok_or_else(|| damaged(&self.path, format_args!("declares a shape {dims:?} too large to count")))?;
        let ty = Id::new(sync(|| unsafe { H5Dget_type(id) }), H5Tclose).ok_or_else(|| self.error(last_error()))?;
        let class = classify(ty.0);
        let elem = sync(|| unsafe { H5Tget_size(ty.0) }) as u64;
        let dcpl = Id::new(sync(|| unsafe { H5Dget_create_plist(id) }), H5Pclose).ok_or_else(|| self.error(last_error()))?;
        let (layout, external, filters) =
            sync(|| unsafe { (H5Pget_layout(dcpl.0) as c_int, H5Pget_external_count(dcpl.0), H5Pget_nfilters(dcpl.0)) });
        if layout == 3 {
            return Err(damaged(&self.path, "is a virtual dataset (its data is in other files), which are not read"));
        }
        if external != 0 {
            return Err(damaged(&self.path, "keeps its data in external files, which are not read"));
        }
        let bytes = n.checked_mul(elem.max(1)).ok_or_else(|| damaged(&self.path, format_args!("declares {n} elements of {elem} bytes")))?;
        if n == 0 {
            return Ok(Extent { dims, n, class });
        }
        let stored = sync(|| unsafe { H5Dget_storage_size(id) });
        if stored > self.size {
            return Err(damaged(&self.path, format_args!("claims {stored} bytes of storage in a file of {} bytes", self.size)));
        }
        if filters > 0 {
            if bytes > stored.saturating_mul(MAX_EXPANSION) {
                return Err(damaged(
                    &self.path,
                    format_args!("declares {n} elements ({bytes} bytes) but stores {stored} compressed bytes (more than {MAX_EXPANSION}:1)"),
                ));
            }
        } else if bytes > stored {
            return Err(damaged(&self.path, format_args!("declares {n} elements ({bytes} bytes) but stores only {stored} bytes")));
        }
        if layout == 2 {
            let mut chunk = vec![0 as hsize_t; dims.len()];
            let rank = sync(|| unsafe { H5Pget_chunk(dcpl.0, chunk.len() as c_int, chunk.as_mut_ptr()) });
            let chunk_bytes = count(&chunk[..rank.max(0) as usize]).and_then(|c| c.checked_mul(elem.max(1)));
            if rank < 0 || chunk_bytes.is_none_or(|b| b > MAX_CHUNK_BYTES) {
                return Err(damaged(&self.path, format_args!("declares chunks of {chunk:?} elements (more than {MAX_CHUNK_BYTES} bytes)")));
            }
        }
        Ok(Extent { dims, n, class })
    }

    /// The dataset's shape (`[1]` for a scalar).
    pub fn shape(&self) -> Result<Vec<usize>> {
        Ok(self.check()?.dims.iter().map(|&d| d as usize).collect())
    }

    /// The whole dataset (`range` None) or elements `range` of a 1-D one, converted to `memtype`.
    fn numeric<T: Copy>(&self, memtype: hid_t, zero: T, range: Option<std::ops::Range<u64>>) -> Result<Vec<T>> {
        let extent = self.check()?;
        let (start, len) = match range {
            None => (0, extent.n),
            Some(r) => (r.start, r.end.saturating_sub(r.start)),
        };
        if !matches!(extent.class, Class::Int { .. } | Class::Float) {
            let kind = match extent.class {
                Class::VarString | Class::FixedString(_) => "strings",
                Class::Bool { .. } => "booleans",
                Class::Other(kind) => kind,
                _ => "numbers",
            };
            return Err(self.error(format_args!("holds {kind}, not numbers")));
        }
        let whole = start == 0 && len == extent.n;
        if !whole && (extent.dims.len() != 1 || start.checked_add(len).is_none_or(|end| end > extent.n)) {
            return Err(damaged(&self.path, format_args!("has {} elements, not {}..{}", extent.n, start, start.saturating_add(len))));
        }
        let mut v = vec![zero; len as usize];
        if len == 0 {
            return Ok(v);
        }
        let id = self.inner.id();
        let rc = if whole {
            sync(|| unsafe { H5Dread(id, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.as_mut_ptr() as *mut c_void) })
        } else {
            let (file_space, mem_space) = self.selection(start, len)?;
            sync(|| unsafe { H5Dread(id, memtype, mem_space.0, file_space.0, H5P_DEFAULT, v.as_mut_ptr() as *mut c_void) })
        };
        if rc < 0 {
            return Err(self.error(last_error()));
        }
        Ok(v)
    }

    /// File and memory dataspaces selecting elements `start..start + len` of a 1-D dataset.
    fn selection(&self, start: u64, len: u64) -> Result<(Id, Id)> {
        let id = self.inner.id();
        let file_space = Id::new(sync(|| unsafe { H5Dget_space(id) }), H5Sclose).ok_or_else(|| self.error(last_error()))?;
        let (offset, size) = ([start], [len]);
        let rc = sync(|| unsafe {
            H5Sselect_hyperslab(file_space.0, H5S_seloper_t::H5S_SELECT_SET, offset.as_ptr(), std::ptr::null(), size.as_ptr(), std::ptr::null())
        });
        if rc < 0 {
            return Err(self.error(last_error()));
        }
        let mem_space = Id::new(sync(|| unsafe { H5Screate_simple(1, size.as_ptr(), std::ptr::null()) }), H5Sclose).ok_or_else(|| self.error(last_error()))?;
        Ok((file_space, mem_space))
    }

    pub fn read_i64(&self) -> Result<Vec<i64>> {
        self.numeric(sync(|| *hdf5_sys::h5t::H5T_NATIVE_INT64), 0i64, None)
    }

    pub fn read_u64(&self) -> Result<Vec<u64>> {
        self.numeric(sync(|| *hdf5_sys::h5t::H5T_NATIVE_UINT64), 0u64, None)
    }

    pub fn read_f64(&self) -> Result<Vec<f64>> {
        self.numeric(sync(|| *hdf5_sys::h5t::H5T_NATIVE_DOUBLE), 0f64, None)
    }

    /// Elements `range` of a 1-D integer dataset.
    pub fn read_i64_range(&self, range: std::ops::Range<u64>) -> Result<Vec<i64>> {
        self.numeric(sync(|| *hdf5_sys::h5t::H5T_NATIVE_INT64), 0i64, Some(range))
    }

    /// A whole string dataset (variable-length or fixed-length), read in batches.
    pub fn read_strings(&self) -> Result<Vec<String>> {
        let extent = self.check()?;
        if !matches!(extent.class, Class::VarString | Class::FixedString(_)) {
            return Err(self.error("does not hold strings"));
        }
        if extent.dims.len() != 1 {
            return Err(damaged(&self.path, format_args!("has shape {:?}, not a list of strings", extent.dims)));
        }
        let ty = Id::new(sync(|| unsafe { H5Dget_type(self.inner.id()) }), H5Tclose).ok_or_else(|| self.error(last_error()))?;
        let memtype = native(ty.0).map_err(|e| self.error(e))?;
        let mut out: Vec<String> = Vec::new();
        let mut text = 0u64;
        let mut start = 0u64;
        while start < extent.n {
            let per_batch = match extent.class {
                Class::FixedString(size) => (STRING_BATCH_BYTES / size.max(1) as u64).max(1),
                _ => STRING_BATCH,
            };
            let len = (extent.n - start).min(per_batch);
            let (file_space, mem_space) = self.selection(start, len)?;
            let id = self.inner.id();
            let before = out.len();
            match extent.class {
                Class::FixedString(_) => {
                    let size = sync(|| unsafe { H5Tget_size(memtype.0) }).max(1);
                    let mut buf = vec![0u8; len as usize * size];
                    let rc = sync(|| unsafe { H5Dread(id, memtype.0, mem_space.0, file_space.0, H5P_DEFAULT, buf.as_mut_ptr() as *mut c_void) });
                    if rc < 0 {
                        return Err(self.error(last_error()));
                    }
                    split_fixed(&buf, size, &mut out);
                }
                _ => {
                    let mut ptrs: Vec<*mut c_char> = vec![std::ptr::null_mut(); len as usize];
                    let rc = sync(|| unsafe { H5Dread(id, memtype.0, mem_space.0, file_space.0, H5P_DEFAULT, ptrs.as_mut_ptr() as *mut c_void) });
                    if rc < 0 {
                        return Err(self.error(last_error()));
                    }
                    // SAFETY: filled by H5Dread with this memory type over `mem_space`.
                    unsafe { take_var_strings(&mut ptrs, memtype.0, mem_space.0, &mut out) };
                }
            }
            // Variable-length strings live uncompressed in the file's heap: together they
            // cannot be longer than the file (unless one is linked many times: damage).
            if extent.class == Class::VarString {
                text += out[before..].iter().map(|s| s.len() as u64).sum::<u64>();
            }
            if text > self.size {
                return Err(damaged(&self.path, format_args!("holds more text than the file's {} bytes", self.size)));
            }
            start += len;
        }
        Ok(out)
    }
}
