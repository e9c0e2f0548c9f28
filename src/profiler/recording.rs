//! Recording on the calling thread: the C API's starts and stops by id and by name, the
//! annotations, and the operations behind the adapters' interface (`adapters::mod`): a
//! recorder window for regions by key, the compiled-function hooks' fast path, pushes and
//! pops by name, and the track of ranges that may end on another thread.

use super::*;

/// A thread's recorder as the code that records regions by key sees it (the OpenMP tool,
/// instrumented functions): starts and stops by id go through the counter sources like any
/// region's.
pub struct Recorder<'a> {
    data: &'a mut ThreadData,
    cs: Option<&'a Counters>,
    /// The thread's `data.late`, taken out for the call (a borrow of its own).
    late: &'a mut crate::late::ThreadLate,
    skip: &'a crate::recorder::SiteSkip,
}

impl crate::late::Recording for Recorder<'_> {
    #[inline(always)]
    fn start(&mut self, id: u32) -> bool {
        open_call(self.data, id, self.cs).is_ok()
    }

    #[inline(always)]
    fn stop(&mut self, id: u32, end: i64) -> bool {
        close_call(self.data, id, end, self.cs).is_ok()
    }

    fn detach(&mut self, id: u32, outermost: bool) -> Option<crate::model::OpenCall> {
        // With counter sources each stop reads them: recorded at once.
        if self.cs.is_some() { None } else { self.data.detach(id, outermost) }
    }

    fn record_detached(&mut self, call: crate::model::OpenCall, end: i64, parent: Option<&mut crate::model::OpenCall>) {
        self.data.record_detached(call, end, parent);
    }

    fn reattach(&mut self, call: crate::model::OpenCall) {
        self.data.reattach(call);
    }

    #[inline(always)]
    fn innermost_start(&self, id: u32) -> Option<i64> {
        self.data.open.last().filter(|c| c.id == id).map(|c| c.start)
    }

    #[inline(always)]
    fn late(&mut self) -> &mut crate::late::ThreadLate {
        self.late
    }

    fn dropped(&mut self, id: u32) {
        self.data.count_dropped(id);
    }

    fn skip_site(&mut self, addr: u64) {
        self.skip.insert(addr);
    }

    fn register(&mut self, provisional: &str) -> Result<u32> {
        REGISTRY.register_provisional(provisional, |id, name| {
            crate::spill::region_registered(id, name);
            if let Some(c) = counter_sources() {
                c.region_created(id, name);
            }
        })
    }
}

/// Run `f` on the calling thread's recorder while the profiler runs, inside the thread's
/// quiescence window like a region start or stop. None when not running, and when the thread
/// is inside a call already (a signal handler, or code the profiler runs, calling back in).
#[inline(always)]
pub fn with_recorder<R>(f: impl FnOnce(&mut Recorder<'_>) -> R) -> Option<R> {
    let p = current_thread();
    if p.is_null() {
        return with_recorder_new_thread(f);
    }
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    let tb = unsafe { &*p };
    if tb.seq.is_inside() {
        return None;
    }
    let seq = tb.seq.enter();
    let state = STATE.load(Ordering::Relaxed);
    let result = if is_running(state) {
        // SAFETY: owner thread, inside enter/leave.
        let data = unsafe { tb.data() };
        let cs = if state == RUNNING { None } else { counter_sources() };
        let mut late = match data.late.take() {
            Some(l) => l,
            None => new_late(),
        };
        let r = f(&mut Recorder { data: &mut *data, cs, late: &mut late, skip: &tb.skip });
        // SAFETY: `data.late` is the None `take` left (`f` reaches the thread's late state only
        // through `late`): written back without a drop of the old value.
        unsafe { std::ptr::write(&mut data.late, Some(late)) };
        Some(r)
    } else {
        None
    };
    tb.seq.leave(seq);
    result
}

#[cold]
fn new_late() -> Box<crate::late::ThreadLate> {
    Box::default()
}

/// The calling thread's first recording through `with_recorder`.
#[cold]
fn with_recorder_new_thread<R>(f: impl FnOnce(&mut Recorder<'_>) -> R) -> Option<R> {
    if !is_running(STATE.load(Ordering::Acquire)) {
        return None;
    }
    new_thread_buffer();
    with_recorder(f)
}

/// Run `f` on the calling thread's recorder while the profiler runs (None otherwise), inside
/// the thread's quiescence window like a region start or stop.
#[inline(always)]
pub fn with_running_thread<R>(f: impl FnOnce(&mut ThreadData) -> R) -> Option<R> {
    // As `with_thread` (a new thread's buffer, a call inside a call refused, counter sources
    // ignored, a stopped profiler counted), with one call of `f` (inlined) and no status.
    let mut p = current_thread();
    if p.is_null() {
        p = running_thread_new()?;
    }
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    let tb = unsafe { &*p };
    let seq = tb.seq.try_enter()?;
    let state = STATE.load(Ordering::Relaxed);
    let r = if is_running(state) {
        // SAFETY: owner thread, inside enter/leave.
        Some(f(unsafe { tb.data() }))
    } else {
        let _ = inactive(state);
        tb.seq.leave(seq);
        after_refusal(state);
        return None;
    };
    tb.seq.leave(seq);
    r
}

/// For a hook that found its source stopped: a program thread's wait while the profile is
/// written after a signal that ends the process (`signals::hold_if_ending`).
#[inline(always)]
pub fn stopped_hook() {
    after_refusal(STATE.load(Ordering::Relaxed));
}

/// `with_running_thread` on a thread's first call: its buffer, if the profiler runs (as
/// `with_new_thread`).
#[cold]
fn running_thread_new() -> Option<*const ThreadBuffer> {
    let state = STATE.load(Ordering::Acquire);
    if !is_running(state) {
        let _ = inactive(state);
        after_refusal(state);
        return None;
    }
    if crate::reentry::busy() {
        return None;
    }
    let _busy = crate::reentry::Busy::enter();
    Some(new_thread_buffer() as *const ThreadBuffer)
}

/// What `function_hook` did.
pub enum Hook<T, R> {
    /// Recorded on the fast path.
    Done(R),
    /// Not handled there: the caller takes the generic path (`with_recorder`), with what
    /// `first` read.
    Slow(T),
}

/// The fast path of an instrumented function's hook (on the thread `site_thread` gave), past
/// the generic `Recorder`: `first` runs before the recorder window (the exit hook reads the
/// clock there); then, only in the plain running state (no counter sources) and on a thread
/// that has its late-named state, `f` runs on the thread's data inside the quiescence window,
/// as a start or stop by handle does. `f` returns None, having changed nothing, for every case
/// it does not handle (the generic path then decides, with the same outcome as if the fast
/// path did not exist).
#[inline(always)]
pub fn function_hook<T: Copy, R>(
    th: HookThread,
    first: impl FnOnce() -> T,
    f: impl FnOnce(&mut ThreadData, &mut crate::late::ThreadLate, T) -> Option<R>,
) -> Hook<T, R> {
    let p = th.0;
    let t = first();
    if p.is_null() {
        return Hook::Slow(t);
    }
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    let tb = unsafe { &*p };
    // Inside a call already (a signal handler interrupted one): the generic path refuses too.
    let Some(seq) = tb.seq.try_enter() else { return Hook::Slow(t) };
    let mut out = None;
    if STATE.load(Ordering::Relaxed) == RUNNING {
        // SAFETY: owner thread, inside enter/leave.
        let data = unsafe { tb.data() };
        if let Some(mut late) = data.late.take() {
            out = f(data, &mut late, t);
            // SAFETY: `data.late` is the None `take` left (`f` cannot reach it: it is ours
            // now): written back without a drop of the old value.
            unsafe { std::ptr::write(&mut data.late, Some(late)) };
        }
    }
    tb.seq.leave(seq);
    match out {
        Some(r) => Hook::Done(r),
        None => Hook::Slow(t),
    }
}

/// Run `f` on the rank's track of asynchronous ranges (`ThreadBuffer::new_track`, made at
/// first use) inside its quiescence window while the profiler runs, one caller at a time;
/// None otherwise, and on a thread inside the library's cold code (a signal handler).
pub fn with_track<R>(f: impl FnOnce(&mut ThreadData) -> R) -> Option<R> {
    static TRACK: Mutex<Option<Arc<ThreadBuffer>>> = Mutex::new(None);
    if crate::reentry::busy() || !is_running(STATE.load(Ordering::Acquire)) {
        return None;
    }
    let _busy = crate::reentry::Busy::enter();
    let mut track = TRACK.lock();
    let tb = track.get_or_insert_with(|| {
        let tb = Arc::new(ThreadBuffer::new_track(NEXT_THREAD.fetch_add(1, Ordering::Relaxed), KEEP_CALLS.load(Ordering::Relaxed)));
        THREADS.lock().push(tb.clone());
        tb
    });
    let seq = tb.seq.enter();
    // SAFETY: the lock makes its holder the track's one writer, inside enter/leave.
    let r = is_running(STATE.load(Ordering::Relaxed)).then(|| f(unsafe { tb.data() }));
    tb.seq.leave(seq);
    r
}

/// The program is about to abort (MPI_Abort): this process writes what it recorded to its own
/// file, talking to no other rank.
pub fn finalize_before_abort() {
    if is_running(STATE.load(Ordering::Acquire)) {
        warn::always("MPI_Abort: writing this rank's profile before the job is killed");
        if let Err(e) = finalize_as(route::Gather::LocalOnly) {
            warn::always(&format!("writing the profile before MPI_Abort failed: {e}"));
        }
    }
}

#[inline(always)]
pub fn start_id(id: u32) -> Result<()> {
    with_thread(|data, cs| {
        if !data.knows_region(id, || REGISTRY.count()) {
            return Err(invalid_handle(id));
        }
        open_call(data, id, cs)
    })
}

#[inline(always)]
pub fn stop_id(id: u32) -> Result<()> {
    with_thread_stop(#[inline(always)] |data, end, cs| {
        if !data.knows_region(id, || REGISTRY.count()) {
            return Err(invalid_handle(id));
        }
        close_call(data, id, end, cs)
    })
}

/// Add analytic work to region `id` on the calling thread: `which` 0 = FLOPs, 1 = bytes.
/// Inside or outside the region; summed per rank and region at finalize.
pub fn annotate(id: u32, which: usize, value: f64) -> Result<()> {
    if !value.is_finite() || value < 0.0 {
        let what = if which == 0 { "flops" } else { "bytes" };
        return Err(Error::new(Status::InvalidArgument, format!("sp_region_add_{what}: {value} is not a finite, non-negative number: ignored")));
    }
    with_thread(|data, _| {
        if !data.knows_region(id, || REGISTRY.count()) {
            return Err(invalid_handle(id));
        }
        // The sum must stay a number too: 1e308 twice is refused, not stored as infinity.
        let sum = data.counters.annotations.get(id as usize).map_or(0.0, |a| a[which]) + value;
        if !sum.is_finite() {
            let what = if which == 0 { "flops" } else { "bytes" };
            return Err(Error::new(
                Status::InvalidArgument,
                format!("sp_region_add_{what}: adding {value} to region '{}' would make its total on this thread infinite: ignored", region_name(id)),
            ));
        }
        data.counters.annotate(id, which, value);
        Ok(())
    })
}

/// A name as the caller holds it: its bytes, and whether they can never change (read-only
/// memory), which lets later calls with the same token skip comparing them.
pub struct CallerName<'a> {
    pub bytes: &'a [u8],
    pub immutable: bool,
}

/// Start a region given by name without hashing it on the common path. `token` identifies
/// where the caller keeps the name (its address); `same(cached)` says whether the caller's
/// name still equals `cached`; `read()` reads and checks the name (only on a cache miss).
#[inline(always)]
pub fn start_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<()> {
    start_named_id(token, same, read).map(drop)
}

/// `start_named`, returning the id of the region started (None when not recording).
#[inline(always)]
pub fn start_named_id<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<Option<u32>> {
    with_thread(|data, cs| {
        let id = lookup_name(data, token, same, read, true)?;
        open_call(data, id, cs).map(|_| Some(id))
    })
}

/// `start_named`, and the region pushed on the calling thread's stack `key` of an adapter's
/// regions whose stops name none (`pop_pushed`), in one window: the push's level on that stack.
/// A start that fails is pushed all the same (its pop stops nothing).
#[inline(always)]
pub fn push_named<'a>(key: usize, token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<u32> {
    with_thread(|data, cs| {
        let started = lookup_name(data, token, same, read, true).and_then(|id| open_call(data, id, cs).map(|_| id));
        let level = data.push_pushed(key, *started.as_ref().unwrap_or(&NOT_PUSHED));
        started.map(|_| level)
    })
}

/// A push on stack `key` that starts nothing (its name was refused): its level.
pub fn push_nothing(key: usize) -> Result<u32> {
    with_thread(|data, _| Ok(data.push_pushed(key, NOT_PUSHED)))
}

/// What a pop of an adapter's stack did.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Popped {
    /// Not recording (and nothing was pushed while recording was off).
    #[default]
    NotRecording,
    /// The stack was empty on this thread: a pop without a push.
    Empty,
    /// The innermost push of the stack was popped (and its region stopped): its level.
    Level(u32),
}

/// Pop the calling thread's stack `key` of `push_named` and stop the region popped.
#[inline(always)]
pub fn pop_pushed(key: usize) -> Result<Popped> {
    with_thread_stop(|data, end, cs| match data.pop_pushed(key) {
        None => Ok(Popped::Empty),
        Some((NOT_PUSHED, level)) => Ok(Popped::Level(level)),
        Some((id, level)) => close_call(data, id, end, cs).map(|_| Popped::Level(level)),
    })
}

/// The id of the region a caller's name stands for (registered at its first use), looked up
/// as `start_named` does, starting nothing; None when not recording.
#[inline(always)]
pub fn named_id<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<Option<u32>> {
    with_thread(|data, _| lookup_name(data, token, same, read, true).map(Some))
}

/// The stop counterpart of `start_named`.
#[inline(always)]
pub fn stop_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<()> {
    with_thread_stop(|data, end, cs| {
        let id = lookup_name(data, token, same, read, false)?;
        close_call(data, id, end, cs)
    })
}

#[inline(always)]
fn lookup_name<'a>(
    data: &mut ThreadData,
    token: usize,
    same: impl Fn(&[u8]) -> bool,
    read: impl FnOnce() -> Result<CallerName<'a>>,
    create: bool,
) -> Result<u32> {
    if let Some(slot) = data.slots.get(slot_index(token)) {
        if slot.token == token && (slot.immutable || same(&slot.name)) {
            return Ok(slot.id);
        }
    }
    // The name caches and the registry lock and allocate: not inside a signal handler that
    // interrupted the library's cold code (a start/stop it interrupted is refused earlier).
    if crate::reentry::busy() {
        return Err(Status::Reentrant.into());
    }
    let name = read()?;
    lookup_name_slow(data, token, name, create)
}

#[cold]
fn lookup_name_slow(data: &mut ThreadData, token: usize, name: CallerName<'_>, create: bool) -> Result<u32> {
    let id = match data.names.get(name.bytes) {
        Some(&id) => id,
        None => cache_name(data, name.bytes, create)?,
    };
    if data.slots.is_empty() {
        data.slots.resize_with(NAME_SLOTS, NameSlot::default);
    }
    data.slots[slot_index(token)] = NameSlot { token, id, immutable: name.immutable, name: name.bytes.into() };
    Ok(id)
}

/// Thread-cache miss: find (or, for a start, register) the name's id.
#[cold]
fn cache_name(data: &mut ThreadData, name: &[u8], create: bool) -> Result<u32> {
    let id = if create {
        register_name(name)?
    } else {
        let valid = crate::registry::validate_name(name)?;
        match REGISTRY.lookup(valid) {
            Some(id) => id,
            None => {
                let msg = format!("stop of region '{valid}' which was never started: ignored");
                warn::once(&format!("unmatched:{valid}"), &msg);
                return Err(Error::new(Status::UnmatchedStop, msg));
            }
        }
    };
    data.names.insert(name.into(), id);
    Ok(id)
}

