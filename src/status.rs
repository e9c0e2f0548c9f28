//! Result codes shared by the core and the C ABI.
//!
//! 0 is success, positive values are harmless notices (the call had no effect but nothing is
//! wrong with the data), negative values are errors. The FFI layer returns `code()` as `int`.

/// Outcome of a profiler call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// `sp_setup` was called again while profiling runs: ignored.
    AlreadySetUp,
    /// `sp_finalize` was called again: ignored.
    AlreadyFinalized,
    NotInitialized,
    Finalized,
    NullArgument,
    InvalidArgument,
    EmptyName,
    NameTooLong,
    InvalidUtf8,
    InvalidHandle,
    TooManyRegions,
    NestingTooDeep,
    UnmatchedStop,
    NotInnermost,
    WriteFailed,
    Mpi,
    /// A feature this machine, kernel or process cannot provide (sampling without perf
    /// events or timers).
    Unsupported,
    /// Called from a signal handler that interrupted a call of this library on the same
    /// thread: refused (nothing recorded, nothing allocated).
    Reentrant,
    Panic,
}

impl Status {
    pub const ALL: [Status; 20] = [
        Status::Ok,
        Status::AlreadySetUp,
        Status::AlreadyFinalized,
        Status::NotInitialized,
        Status::Finalized,
        Status::NullArgument,
        Status::InvalidArgument,
        Status::EmptyName,
        Status::NameTooLong,
        Status::InvalidUtf8,
        Status::InvalidHandle,
        Status::TooManyRegions,
        Status::NestingTooDeep,
        Status::UnmatchedStop,
        Status::NotInnermost,
        Status::WriteFailed,
        Status::Mpi,
        Status::Unsupported,
        Status::Reentrant,
        Status::Panic,
    ];

    /// The stable integer code of the C ABI (`SP_*` constants in the header).
    pub const fn code(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::AlreadySetUp => 1,
            Status::AlreadyFinalized => 2,
            Status::NotInitialized => -1,
            Status::Finalized => -2,
            Status::NullArgument => -3,
            Status::InvalidArgument => -4,
            Status::EmptyName => -5,
            Status::NameTooLong => -6,
            Status::InvalidUtf8 => -7,
            Status::InvalidHandle => -8,
            Status::TooManyRegions => -9,
            Status::NestingTooDeep => -10,
            Status::UnmatchedStop => -11,
            Status::NotInnermost => -12,
            Status::WriteFailed => -13,
            Status::Mpi => -14,
            Status::Unsupported => -15,
            Status::Reentrant => -16,
            Status::Panic => -99,
        }
    }

    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }

    pub const fn is_error(self) -> bool {
        self.code() < 0
    }

    /// One-line description; static so the C ABI can hand it out without allocating.
    pub const fn describe(self) -> &'static str {
        match self {
            Status::Ok => "success",
            Status::AlreadySetUp => "profiling was already set up; the second sp_setup was ignored",
            Status::AlreadyFinalized => "profiling was already finalized; the second sp_finalize was ignored",
            Status::NotInitialized => "sp_setup has not been called: the call was ignored",
            Status::Finalized => "profiling has been finalized: the call was ignored",
            Status::NullArgument => "a required pointer argument is NULL",
            Status::InvalidArgument => "an argument is invalid",
            Status::EmptyName => "the region name is empty",
            Status::NameTooLong => "the region name is longer than SP_MAX_NAME_LEN bytes",
            Status::InvalidUtf8 => "the region name is not valid UTF-8 or contains a NUL byte",
            Status::InvalidHandle => "the region handle was not returned by sp_region_register",
            Status::TooManyRegions => "too many distinct regions (limit SP_MAX_REGIONS)",
            Status::NestingTooDeep => "regions nest deeper than SP_MAX_DEPTH on this thread (missing stops?)",
            Status::UnmatchedStop => "stop of a region that is not open on this thread",
            Status::NotInnermost => "stop of a region that is not the innermost open one; inner regions were closed unrecorded",
            Status::WriteFailed => "the profile file could not be written",
            Status::Mpi => "an MPI operation failed",
            Status::Unsupported => "not possible on this machine or in this process (see sp_last_error)",
            Status::Reentrant => "called from a signal handler that interrupted a call of scope_profiler on the same thread: refused",
            Status::Panic => "internal error (a panic was caught); the host program is unaffected",
        }
    }
}

/// A failed call: its status plus a message for `sp_last_error`.
///
/// One pointer wide, so that `Result<(), Error>` fits in a register (the hot path returns it).
/// An error made from a bare `Status` points at a static entry and allocates nothing (so the
/// refusals of the hot path, `Reentrant` above all, are safe inside a signal handler); one
/// with its own message is boxed.
pub struct Error(std::ptr::NonNull<ErrorInner>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInner {
    pub status: Status,
    /// Empty for an error made from a bare status: its `describe()` is the message.
    pub message: String,
}

/// One static error per status, in the order of `Status::ALL`.
static BARE: [ErrorInner; Status::ALL.len()] = {
    let mut out = [const { ErrorInner { status: Status::Ok, message: String::new() } }; Status::ALL.len()];
    let mut i = 0;
    while i < Status::ALL.len() {
        out[i].status = Status::ALL[i];
        i += 1;
    }
    out
};

// SAFETY: the pointee is either a static (immutable) or a box owned by this value.
unsafe impl Send for Error {}
unsafe impl Sync for Error {}

impl Error {
    #[cold]
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        let b = Box::new(ErrorInner { status, message: message.into() });
        // SAFETY: Box::into_raw is never null.
        Error(unsafe { std::ptr::NonNull::new_unchecked(Box::into_raw(b)) })
    }

    /// The error of a bare status: no allocation.
    #[inline]
    pub fn bare(status: Status) -> Error {
        let i = Status::ALL.iter().position(|&s| s == status).unwrap_or(Status::ALL.len() - 1);
        Error(std::ptr::NonNull::from(&BARE[i]))
    }

    fn is_static(&self) -> bool {
        let base = BARE.as_ptr() as usize;
        let p = self.0.as_ptr() as usize;
        p >= base && p < base + std::mem::size_of_val(&BARE)
    }

    /// The message: the error's own, else its status's description.
    pub fn text(&self) -> &str {
        if self.message.is_empty() { self.status.describe() } else { &self.message }
    }
}

impl Drop for Error {
    fn drop(&mut self) {
        if !self.is_static() {
            // SAFETY: not static, so made by Box::into_raw in `new` and owned by us.
            drop(unsafe { Box::from_raw(self.0.as_ptr()) });
        }
    }
}

impl Clone for Error {
    fn clone(&self) -> Error {
        if self.is_static() { Error(self.0) } else { Error::new(self.status, self.message.clone()) }
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        **self == **other
    }
}
impl Eq for Error {}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Error").field("status", &self.status).field("message", &self.text()).finish()
    }
}

impl std::ops::Deref for Error {
    type Target = ErrorInner;
    fn deref(&self) -> &ErrorInner {
        // SAFETY: a static entry or our live box.
        unsafe { self.0.as_ref() }
    }
}

impl From<Status> for Error {
    #[inline]
    fn from(status: Status) -> Error {
        Error::bare(status)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code()), Some(s));
            assert_eq!(s.is_error(), s.code() < 0);
        }
        let mut codes: Vec<i32> = Status::ALL.iter().map(|s| s.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), Status::ALL.len());
        assert_eq!(std::mem::size_of::<Result<()>>(), 8, "the hot path returns this in a register");
        assert_eq!(Status::from_code(12345), None);
    }

    #[test]
    fn bare_errors_are_static_and_boxed_ones_own_their_message() {
        let e = Error::from(Status::Reentrant);
        assert_eq!(e.status, Status::Reentrant);
        assert_eq!(e.text(), Status::Reentrant.describe());
        assert!(e.is_static() && e.clone().is_static());
        let b = Error::new(Status::Mpi, "x failed");
        assert!(!b.is_static());
        assert_eq!((b.status, b.text(), b.clone().text().to_string()), (Status::Mpi, "x failed", "x failed".to_string()));
        for s in Status::ALL {
            assert_eq!(Error::bare(s).status, s);
        }
    }
}
