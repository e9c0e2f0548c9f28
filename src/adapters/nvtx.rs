//! The NVTX injection (NVTX 3, `nvToolsExt.h`; the slots are `nvtxDetail/nvtxImplCore.h`'s):
//! at a program's first NVTX call, NVTX loads the library named by `NVTX_INJECTION64_PATH` and
//! calls its `InitializeInjectionNvtx2`, which fills the callback slots of the modules CORE and
//! CORE2 (domains) that we take. Every callback catches panics and checks its arguments here;
//! the regions enter the recording through `adapters`.
//!
//! Recorded: push/pop ranges (`A`, `W`, `Ex` with an ASCII, Unicode or registered message)
//! as regions named by their message on the calling thread, `<message> [<domain>]` for a
//! domain's; start/end ranges as regions `<message> [range]` (`[<domain>, range]`), recorded
//! on the thread that ends them, which may not be the one that started them; marks as
//! instant events `<message> [mark]`; thread names as rank attributes `thread_name:<tid>`.
//! A pop without a push, an end of an unknown range, a NULL or malformed message is said once
//! and ignored. `SCOPE_PROFILER_NVTX=0` turns it off (the program runs without a tool).

#![allow(non_camel_case_types)]

use super::{self as recording, NOT_RECORDED, Stack};
use crate::warn;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The switch for this adapter.
pub const ENV: &str = "SCOPE_PROFILER_NVTX";

// NvtxCallbackModule, NvtxExportTableID
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;
const ETID_CALLBACKS: u32 = 1;
// nvtxMessageType_t
const MESSAGE_UNKNOWN: i32 = 0;
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;
/// More domains, registered strings and open start/end ranges than any program has: later
/// ones are refused (said once).
const MAX_DOMAINS: usize = 4096;
const MAX_STRINGS: usize = 1 << 16;
const MAX_OPEN_RANGES: usize = 1 << 20;
/// Tags of the handles we give out (a handle that lacks its tag is not ours: refused).
const DOMAIN_TAG: u64 = 0x5350_4e56_5458_444d;
const STRING_TAG: u64 = 0x5350_4e56_5458_5354;

type GetExportTable = Option<unsafe extern "C" fn(export_table_id: u32) -> *const c_void>;
type FunctionSlot = *mut Option<unsafe extern "C" fn()>;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<unsafe extern "C" fn(module: c_int, out_table: *mut *const FunctionSlot, out_size: *mut u32) -> c_int>,
}

/// `nvtxEventAttributes_t` (version 2 and later: 48 bytes).
#[repr(C)]
pub struct nvtxEventAttributes_t {
    pub version: u16,
    pub size: u16,
    pub category: u32,
    pub color_type: i32,
    pub color: u32,
    pub payload_type: i32,
    pub reserved0: i32,
    pub payload: u64,
    pub message_type: i32,
    pub message: *const c_void,
}

/// A domain (our `nvtxDomainHandle_t`): its suffixes, made once.
pub struct Domain {
    tag: u64,
    push: String,
    range: String,
    mark: String,
}

/// A registered string (our `nvtxStringHandle_t`): its region names, made once.
pub struct Registered {
    tag: u64,
    name: String,
}

static ON: AtomicBool = AtomicBool::new(false);
static DOMAINS: AtomicUsize = AtomicUsize::new(0);
static STRINGS: AtomicUsize = AtomicUsize::new(0);
static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);
/// Open start/end ranges: id -> (region, start ticks).
static RANGES: Mutex<Option<HashMap<u64, (u32, i64)>>> = Mutex::new(None);

thread_local! {
    /// The thread's open push/pop ranges, per domain (0: the default domain).
    static STACKS: RefCell<Vec<(usize, Stack)>> = const { RefCell::new(Vec::new()) };
}

/// Called by NVTX at the program's first NVTX call: take the CORE and CORE2 slots.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: GetExportTable) -> c_int {
    catch_unwind(|| {
        if recording::switched_off_by_env(ENV) || recording::another_copy_is_used() {
            return 0;
        }
        let Some(get) = get_export_table else { return 0 };
        // SAFETY: NVTX's export-table function with a table id.
        let t = unsafe { get(ETID_CALLBACKS) } as *const ExportTableCallbacks;
        if t.is_null() {
            return 0;
        }
        // SAFETY: NVTX's callbacks table, struct_size first.
        let t = unsafe { &*t };
        if t.struct_size < std::mem::size_of::<ExportTableCallbacks>() {
            return 0;
        }
        let Some(module_table) = t.get_module_function_table else { return 0 };
        let core: &[(usize, *const ())] = &[
            (1, mark_ex as *const ()),
            (2, mark_a as *const ()),
            (3, mark_w as *const ()),
            (4, range_start_ex as *const ()),
            (5, range_start_a as *const ()),
            (6, range_start_w as *const ()),
            (7, range_end as *const ()),
            (8, range_push_ex as *const ()),
            (9, range_push_a as *const ()),
            (10, range_push_w as *const ()),
            (11, range_pop as *const ()),
            (14, name_os_thread_a as *const ()),
            (15, name_os_thread_w as *const ()),
        ];
        let core2: &[(usize, *const ())] = &[
            (1, domain_mark_ex as *const ()),
            (2, domain_range_start_ex as *const ()),
            (3, domain_range_end as *const ()),
            (4, domain_range_push_ex as *const ()),
            (5, domain_range_pop as *const ()),
            (10, domain_register_string_a as *const ()),
            (11, domain_register_string_w as *const ()),
            (12, domain_create_a as *const ()),
            (13, domain_create_w as *const ()),
        ];
        // SAFETY: NVTX's module tables, filled as its injection interface says.
        if !unsafe { fill(module_table, MODULE_CORE, core) } {
            return 0;
        }
        // SAFETY: as above (a NVTX without domains leaves them out).
        unsafe { fill(module_table, MODULE_CORE2, core2) };
        if recording::not_set_up() {
            if let Err(e) = recording::set_up(recording::ImplicitOrigin::NvtxInjection) {
                warn::once("implicit-setup-failed", &format!("setting profiling up for NVTX failed: {e}"));
                return 0;
            }
        }
        recording::note_source("nvtx", "NVTX injection");
        ON.store(true, Ordering::Release);
        1
    })
    .unwrap_or(0)
}

/// The same, found in the process by a program built with
/// `-DNVTX_SUPPORT_ALREADY_INJECTED_LIBRARY=1` (linked with the library, or preloaded): NVTX 3.1
/// looks for this name there only when built so.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2Preinject(get_export_table: GetExportTable) -> c_int {
    InitializeInjectionNvtx2(get_export_table)
}

/// Put each callback into its slot of `module` (slots out of the table or NULL are skipped).
unsafe fn fill(
    module_table: unsafe extern "C" fn(c_int, *mut *const FunctionSlot, *mut u32) -> c_int,
    module: c_int,
    callbacks: &[(usize, *const ())],
) -> bool {
    let mut table: *const FunctionSlot = std::ptr::null();
    let mut size: u32 = 0;
    // SAFETY: NVTX's GetModuleFunctionTable with out-parameters of the declared types.
    if unsafe { module_table(module, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    for &(i, f) in callbacks {
        if i >= size as usize {
            continue;
        }
        // SAFETY: entry i < size of NVTX's table: the address of its function-pointer slot.
        let slot = unsafe { *table.add(i) };
        if !slot.is_null() {
            // SAFETY: the slot of callback i; `f` has the signature NVTX gives that slot.
            unsafe { *slot = Some(std::mem::transmute::<*const (), unsafe extern "C" fn()>(f)) };
        }
    }
    true
}

#[inline(always)]
fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Said once per kind of misuse.
#[cold]
fn misuse(key: &str, what: &str) {
    warn::once(&format!("nvtx-{key}"), &format!("NVTX: {what}: ignored"));
}

// ---------------------------------------------------------------------------------------
// Messages.

/// A message as the program gave it.
enum Message {
    Ascii(*const c_char),
    Wide(*const i32),
    Registered(&'static Registered),
    None,
}

/// The message of an attribute structure, None if it is malformed.
///
/// # Safety
/// `a` is NULL or points to the program's attribute structure.
unsafe fn message_of(a: *const nvtxEventAttributes_t) -> Option<Message> {
    if a.is_null() {
        misuse("null-attributes", "a NULL event attribute structure");
        return None;
    }
    // SAFETY: the program's structure; its size is checked before the message is read.
    let a = unsafe { &*a };
    if (a.size as usize) < std::mem::size_of::<nvtxEventAttributes_t>() || a.version < 2 {
        misuse("bad-attributes", &format!("an event attribute structure of version {} and size {} (want version 2 or later and {} bytes)", a.version, a.size, std::mem::size_of::<nvtxEventAttributes_t>()));
        return None;
    }
    match a.message_type {
        MESSAGE_ASCII if !a.message.is_null() => Some(Message::Ascii(a.message as *const c_char)),
        MESSAGE_UNICODE if !a.message.is_null() => Some(Message::Wide(a.message as *const i32)),
        // SAFETY: a handle we gave out (its tag says so) or refused.
        MESSAGE_REGISTERED => unsafe { registered(a.message) }.map(Message::Registered),
        MESSAGE_UNKNOWN => Some(Message::None),
        MESSAGE_ASCII | MESSAGE_UNICODE => {
            misuse("null-message", "a NULL message");
            None
        }
        t => {
            misuse("message-type", &format!("a message of unknown type {t}"));
            None
        }
    }
}

/// A registered string handle of ours.
///
/// # Safety
/// `p` is NULL or a handle NVTX got from `domain_register_string_*`.
unsafe fn registered(p: *const c_void) -> Option<&'static Registered> {
    if p.is_null() {
        misuse("null-string", "a NULL registered-string handle");
        return None;
    }
    // SAFETY: as the caller promises; the tag tells ours from anything else.
    let r = unsafe { &*(p as *const Registered) };
    if r.tag != STRING_TAG {
        misuse("bad-string", "a registered-string handle that this library did not give out");
        return None;
    }
    Some(r)
}

/// A domain handle of ours (NULL: the default domain, None: not ours).
///
/// # Safety
/// `p` is NULL or a handle NVTX got from `domain_create_*`.
unsafe fn domain(p: *const c_void) -> Option<Option<&'static Domain>> {
    if p.is_null() {
        return Some(None);
    }
    // SAFETY: as the caller promises; the tag tells ours from anything else.
    let d = unsafe { &*(p as *const Domain) };
    if d.tag != DOMAIN_TAG {
        misuse("bad-domain", "a domain handle that this library did not give out");
        return None;
    }
    Some(Some(d))
}

/// The text of a wide (UTF-32) string, at most `MAX_LABEL + 1` units read; None for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated wide string.
unsafe fn wide_text(p: *const i32) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    let mut s = String::new();
    for i in 0..=recording::MAX_LABEL {
        // SAFETY: units 0..i were not NUL, so the string extends to i.
        let u = unsafe { *p.add(i) };
        if u == 0 {
            break;
        }
        s.push(char::from_u32(u as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    Some(s.into_bytes())
}

/// Whether the wide string at `p` followed by `suffix` is `cached`.
///
/// # Safety
/// `p` is a NUL-terminated wide string.
unsafe fn wide_equals_with_suffix(p: *const i32, cached: &[u8], suffix: &[u8]) -> bool {
    let Some(head) = cached.len().checked_sub(suffix.len()).filter(|&h| &cached[h..] == suffix).map(|h| &cached[..h]) else { return false };
    let Ok(head) = std::str::from_utf8(head) else { return false };
    let mut i = 0;
    for c in head.chars() {
        // SAFETY: units 0..i matched non-NUL characters, so the string extends to i.
        if unsafe { *p.add(i) } as u32 != c as u32 {
            return false;
        }
        i += 1;
    }
    // SAFETY: as above.
    unsafe { *p.add(i) == 0 }
}

/// The region name of `m` with `suffix` (not on the hot path).
fn name_of(m: &Message, suffix: &str) -> String {
    match *m {
        // SAFETY: a NUL-terminated string of the program's.
        Message::Ascii(p) => recording::region_name("NVTX", unsafe { recording::c_bytes(p) }, suffix),
        // SAFETY: as above, wide.
        Message::Wide(p) => recording::region_name("NVTX", unsafe { wide_text(p) }.as_deref(), suffix),
        Message::Registered(r) => format!("{}{suffix}", r.name),
        Message::None => format!("(no message){suffix}"),
    }
}

/// Start the region of message `m` (cached by the message's address and content).
#[inline(always)]
fn start_message(m: &Message, suffix: &'static str) -> u32 {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let made = std::cell::OnceCell::new();
        let read = || Ok(recording::CallerName { bytes: made.get_or_init(|| name_of(m, suffix)).as_bytes(), immutable: false });
        let s = suffix.as_bytes();
        match *m {
            // SAFETY: NUL-terminated strings of the program's.
            Message::Ascii(p) => recording::start_named(p as usize, |c| unsafe { recording::c_equals_with_suffix(p, c, s) }, read),
            Message::Wide(p) => recording::start_named(p as usize, |c| unsafe { wide_equals_with_suffix(p, c, s) }, read),
            // Our own handle: its name never changes (the suffix is the handle's domain's).
            Message::Registered(reg) => recording::start_named(reg as *const Registered as usize, |_| true, || Ok(recording::CallerName { bytes: reg.name.as_bytes(), immutable: true })),
            Message::None => recording::start_named(suffix.as_ptr() as usize ^ 1, |c| c == made.get_or_init(|| name_of(m, suffix)).as_bytes(), read),
        }
        .ok()
        .flatten()
    }));
    r.ok().flatten().unwrap_or(NOT_RECORDED)
}

// ---------------------------------------------------------------------------------------
// Push and pop.

#[inline(always)]
fn push(domain: usize, m: Option<Message>, suffix: &'static str) -> c_int {
    let id = match m {
        Some(m) => start_message(&m, suffix),
        None => NOT_RECORDED,
    };
    STACKS
        .try_with(|s| {
            // Busy: a signal handler of the program's calling NVTX inside an NVTX call.
            let Ok(mut s) = s.try_borrow_mut() else { return -1 };
            let i = match s.iter().position(|e| e.0 == domain) {
                Some(i) => i,
                None => {
                    s.push((domain, Stack::new()));
                    s.len() - 1
                }
            };
            s[i].1.push(id);
            s[i].1.depth() as c_int - 1
        })
        .unwrap_or(-1)
}

#[inline(always)]
fn pop(domain: usize) -> c_int {
    let popped = STACKS.try_with(|s| {
        let mut s = s.try_borrow_mut().ok()?;
        let e = s.iter_mut().find(|e| e.0 == domain)?;
        e.1.pop().map(|id| (id, e.1.depth() as c_int))
    });
    match popped {
        Ok(Some((id, level))) => {
            if id != NOT_RECORDED {
                let _ = catch_unwind(|| recording::stop(id));
            }
            level
        }
        Ok(None) => {
            misuse("pop", "a range pop without a push on this thread");
            -1
        }
        Err(_) => -1,
    }
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    if !on() {
        return -1;
    }
    let m = if message.is_null() {
        misuse("null-message", "a NULL message");
        None
    } else {
        Some(Message::Ascii(message))
    };
    push(0, m, "")
}

unsafe extern "C" fn range_push_w(message: *const i32) -> c_int {
    if !on() {
        return -1;
    }
    let m = if message.is_null() {
        misuse("null-message", "a NULL message");
        None
    } else {
        Some(Message::Wide(message))
    };
    push(0, m, "")
}

unsafe extern "C" fn range_push_ex(a: *const nvtxEventAttributes_t) -> c_int {
    if !on() {
        return -1;
    }
    // SAFETY: the program's attributes or NULL.
    push(0, unsafe { message_of(a) }, "")
}

unsafe extern "C" fn range_pop() -> c_int {
    if !on() {
        return -1;
    }
    pop(0)
}

unsafe extern "C" fn domain_range_push_ex(d: *const c_void, a: *const nvtxEventAttributes_t) -> c_int {
    if !on() {
        return -1;
    }
    // SAFETY: a handle of ours or NULL.
    let Some(dom) = (unsafe { domain(d) }) else { return push(d as usize, None, "") };
    let suffix: &'static str = dom.map_or("", |d| d.push.as_str());
    // SAFETY: the program's attributes or NULL.
    let m = unsafe { message_of(a) };
    // A registered string of another domain keeps its own domain's name.
    push(d as usize, m, suffix)
}

unsafe extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    if !on() {
        return -1;
    }
    pop(d as usize)
}

// ---------------------------------------------------------------------------------------
// Start and end (may end on another thread), marks.

fn range_start(m: Option<Message>, suffix: &str) -> u64 {
    let Some(m) = m else { return 0 };
    let r = catch_unwind(AssertUnwindSafe(|| {
        let n = name_of(&m, suffix);
        let id = recording::register(n.as_bytes()).ok().filter(|_| !recording::switched_off())?;
        let handle = NEXT_RANGE.fetch_add(1, Ordering::Relaxed);
        let mut g = RANGES.lock();
        let open = g.get_or_insert_with(HashMap::new);
        if open.len() >= MAX_OPEN_RANGES {
            misuse("too-many-ranges", &format!("more than {MAX_OPEN_RANGES} start/end ranges open at once (ends missing?): later ones are not recorded"));
            return None;
        }
        open.insert(handle, (id, recording::now()));
        Some(handle)
    }));
    r.ok().flatten().unwrap_or(0)
}

fn range_stop(handle: u64) {
    let _ = catch_unwind(|| {
        let found = RANGES.lock().as_mut().and_then(|m| m.remove(&handle));
        match found {
            Some((id, start)) => {
                recording::closed(id, start);
            }
            None => misuse("end", &format!("an end of range {handle}, which is not open")),
        }
    });
}

fn mark(m: Option<Message>, suffix: &str) {
    let Some(m) = m else { return };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let n = name_of(&m, suffix);
        if let Ok(id) = recording::register(n.as_bytes()) {
            if !recording::switched_off() {
                recording::instant(id);
            }
        }
    }));
}

fn ascii(p: *const c_char) -> Option<Message> {
    if p.is_null() {
        misuse("null-message", "a NULL message");
        return None;
    }
    Some(Message::Ascii(p))
}

fn wide(p: *const i32) -> Option<Message> {
    if p.is_null() {
        misuse("null-message", "a NULL message");
        return None;
    }
    Some(Message::Wide(p))
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    if on() { range_start(ascii(message), " [range]") } else { 0 }
}

unsafe extern "C" fn range_start_w(message: *const i32) -> u64 {
    if on() { range_start(wide(message), " [range]") } else { 0 }
}

unsafe extern "C" fn range_start_ex(a: *const nvtxEventAttributes_t) -> u64 {
    // SAFETY: the program's attributes or NULL.
    if on() { range_start(unsafe { message_of(a) }, " [range]") } else { 0 }
}

unsafe extern "C" fn range_end(id: u64) {
    if on() {
        range_stop(id)
    }
}

unsafe extern "C" fn domain_range_start_ex(d: *const c_void, a: *const nvtxEventAttributes_t) -> u64 {
    if !on() {
        return 0;
    }
    // SAFETY: a handle of ours or NULL; the program's attributes or NULL.
    let Some(dom) = (unsafe { domain(d) }) else { return 0 };
    range_start(unsafe { message_of(a) }, dom.map_or(" [range]", |d| d.range.as_str()))
}

unsafe extern "C" fn domain_range_end(_d: *const c_void, id: u64) {
    if on() {
        range_stop(id)
    }
}

unsafe extern "C" fn mark_a(message: *const c_char) {
    if on() {
        mark(ascii(message), " [mark]")
    }
}

unsafe extern "C" fn mark_w(message: *const i32) {
    if on() {
        mark(wide(message), " [mark]")
    }
}

unsafe extern "C" fn mark_ex(a: *const nvtxEventAttributes_t) {
    if on() {
        // SAFETY: the program's attributes or NULL.
        mark(unsafe { message_of(a) }, " [mark]")
    }
}

unsafe extern "C" fn domain_mark_ex(d: *const c_void, a: *const nvtxEventAttributes_t) {
    if !on() {
        return;
    }
    // SAFETY: a handle of ours or NULL; the program's attributes or NULL.
    let Some(dom) = (unsafe { domain(d) }) else { return };
    mark(unsafe { message_of(a) }, dom.map_or(" [mark]", |d| d.mark.as_str()))
}

// ---------------------------------------------------------------------------------------
// Domains, registered strings, thread names.

fn create_domain(name: Option<Vec<u8>>) -> *const c_void {
    catch_unwind(|| {
        if DOMAINS.fetch_add(1, Ordering::Relaxed) >= MAX_DOMAINS {
            misuse("too-many-domains", &format!("more than {MAX_DOMAINS} domains created: later ones are the default domain"));
            return std::ptr::null();
        }
        let n = recording::region_name("NVTX", name.as_deref(), "");
        let d = Box::new(Domain { tag: DOMAIN_TAG, push: format!(" [{n}]"), range: format!(" [{n}, range]"), mark: format!(" [{n}, mark]") });
        Box::leak(d) as *const Domain as *const c_void
    })
    .unwrap_or(std::ptr::null())
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_void {
    if !on() {
        return std::ptr::null();
    }
    // SAFETY: NUL-terminated or NULL.
    create_domain(unsafe { recording::c_bytes(name) }.map(<[u8]>::to_vec))
}

unsafe extern "C" fn domain_create_w(name: *const i32) -> *const c_void {
    if !on() {
        return std::ptr::null();
    }
    // SAFETY: NUL-terminated or NULL.
    create_domain(unsafe { wide_text(name) })
}

fn register_string(d: *const c_void, text: Option<Vec<u8>>) -> *const c_void {
    catch_unwind(|| {
        // SAFETY: a handle of ours or NULL.
        let Some(dom) = (unsafe { domain(d) }) else { return std::ptr::null() };
        if text.is_none() {
            misuse("null-string", "a NULL string to register");
            return std::ptr::null();
        }
        if STRINGS.fetch_add(1, Ordering::Relaxed) >= MAX_STRINGS {
            misuse("too-many-strings", &format!("more than {MAX_STRINGS} strings registered: later ones are refused"));
            return std::ptr::null();
        }
        let name = recording::region_name("NVTX", text.as_deref(), dom.map_or("", |d| d.push.as_str()));
        Box::leak(Box::new(Registered { tag: STRING_TAG, name })) as *const Registered as *const c_void
    })
    .unwrap_or(std::ptr::null())
}

unsafe extern "C" fn domain_register_string_a(d: *const c_void, s: *const c_char) -> *const c_void {
    if !on() {
        return std::ptr::null();
    }
    // SAFETY: NUL-terminated or NULL.
    register_string(d, unsafe { recording::c_bytes(s) }.map(<[u8]>::to_vec))
}

unsafe extern "C" fn domain_register_string_w(d: *const c_void, s: *const i32) -> *const c_void {
    if !on() {
        return std::ptr::null();
    }
    // SAFETY: NUL-terminated or NULL.
    register_string(d, unsafe { wide_text(s) })
}

fn name_thread(tid: u32, name: Option<Vec<u8>>) {
    let _ = catch_unwind(|| match name {
        Some(n) => recording::note(&format!("thread_name:{tid}"), &String::from_utf8_lossy(&n)),
        None => misuse("null-thread-name", "a NULL thread name"),
    });
}

unsafe extern "C" fn name_os_thread_a(tid: u32, name: *const c_char) {
    if on() {
        // SAFETY: NUL-terminated or NULL.
        name_thread(tid, unsafe { recording::c_bytes(name) }.map(<[u8]>::to_vec))
    }
}

unsafe extern "C" fn name_os_thread_w(tid: u32, name: *const i32) {
    if on() {
        // SAFETY: NUL-terminated or NULL.
        name_thread(tid, unsafe { wide_text(name) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_structure_is_nvtx_s() {
        assert_eq!(std::mem::size_of::<nvtxEventAttributes_t>(), 48);
        assert_eq!(std::mem::offset_of!(nvtxEventAttributes_t, message_type), 32);
        assert_eq!(std::mem::offset_of!(nvtxEventAttributes_t, message), 40);
    }

    #[test]
    fn wide_names_compare_with_their_suffix() {
        let w: Vec<i32> = "héllo\0".chars().map(|c| c as i32).collect();
        // SAFETY: a NUL-terminated wide string.
        unsafe {
            assert_eq!(wide_text(w.as_ptr()).unwrap(), "héllo".as_bytes());
            assert!(wide_equals_with_suffix(w.as_ptr(), "héllo [d]".as_bytes(), b" [d]"));
            assert!(!wide_equals_with_suffix(w.as_ptr(), "héll [d]".as_bytes(), b" [d]"));
            assert!(!wide_equals_with_suffix(w.as_ptr(), "héllo".as_bytes(), b" [d]"));
        }
    }
}
