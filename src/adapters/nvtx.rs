//! The NVTX injection (NVTX 3, `nvToolsExt.h`; the slots are `nvtxDetail/nvtxImplCore.h`'s):
//! at a program's first NVTX call, NVTX loads the library named by `NVTX_INJECTION64_PATH` and
//! calls its `InitializeInjectionNvtx2`, which fills the callback slots of the modules CORE and
//! CORE2 (domains) that we take. Every callback catches panics and checks its arguments here;
//! the regions enter the recording through `adapters`.
//!
//! Recorded: push/pop ranges (`A`, `W`, `Ex` with an ASCII, Unicode or registered message)
//! as regions named by their message on the calling thread, `<message> [<domain>]` for a
//! domain's; start/end ranges, which may end on another thread than the one that started
//! them, as regions `<message> [range]` (`[<domain>, range]`) on the rank's track of
//! asynchronous ranges (`adapters::range_start`), with the starting and ending threads; marks
//! as instant events `<message> [mark]`; thread names as rank attributes `thread_name:<tid>`.
//! A pop without a push, an end of an unknown range, a NULL or malformed message is said once
//! and ignored. `SCOPE_PROFILER_NVTX=0` turns it off (the program runs without a tool).

#![allow(non_camel_case_types)]

use super::{self as recording, RangeEnd};
use crate::warn;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
/// More domains and registered strings than any program has: later ones are refused (said
/// once).
const MAX_DOMAINS: usize = 4096;
const MAX_STRINGS: usize = 1 << 16;
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

/// How a message becomes a region name: the suffix, and the kind of the name cache's key
/// (`adapters::name_token`). A kind that is the form's alone (`unique`) lets a message in
/// read-only memory be trusted by its address (never compared again).
#[derive(Clone, Copy)]
struct Form {
    suffix: &'static str,
    kind: u8,
    unique: bool,
}

/// The default domain's forms; a created domain's kinds follow, three per domain (the first
/// `UNIQUE_DOMAINS` domains have kinds of their own, later ones share them and are compared).
const PUSH: Form = Form { suffix: "", kind: 0, unique: true };
const RANGE: Form = Form { suffix: " [range]", kind: 1, unique: true };
const MARK: Form = Form { suffix: " [mark]", kind: 2, unique: true };
const UNIQUE_DOMAINS: usize = 84;

/// A domain (our `nvtxDomainHandle_t`): its forms, made once.
pub struct Domain {
    tag: u64,
    push: Form,
    range: Form,
    mark: Form,
}

/// A registered string (our `nvtxStringHandle_t`): its text made safe, once.
pub struct Registered {
    tag: u64,
    name: String,
}

static ON: AtomicBool = AtomicBool::new(false);
static DOMAINS: AtomicUsize = AtomicUsize::new(0);
static STRINGS: AtomicUsize = AtomicUsize::new(0);


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
        Message::None => format!("{NO_MESSAGE}{suffix}"),
    }
}

/// Whether the message at `p` (units of `unit` bytes), its terminator included, lies in
/// read-only memory: a string literal, which never changes (for a cache miss).
fn read_only_message(p: *const u8, unit: usize) -> bool {
    let mut units = 0;
    while units <= recording::MAX_LABEL {
        // SAFETY: a NUL-terminated string of the program's: units 0..units were not NUL.
        let nul = unsafe { if unit == 1 { *p.add(units) == 0 } else { *(p as *const i32).add(units) == 0 } };
        if nul {
            break;
        }
        units += 1;
    }
    recording::read_only(p, (units + 1) * unit)
}

/// The name of message `m` in `form` at a cache miss (made in `made`), and whether the
/// program's bytes behind it never change: a registered string's (in a form of its own), or
/// a string literal's (units of `unit` bytes in read-only memory); kept off the hot path.
#[cold]
#[inline(never)]
fn read_name<'a>(made: &'a std::cell::OnceCell<String>, m: &Message, form: Form, unit: usize) -> crate::status::Result<recording::CallerName<'a>> {
    let immutable = form.unique
        && match *m {
            Message::Ascii(p) => read_only_message(p as *const u8, unit),
            Message::Wide(p) => read_only_message(p as *const u8, unit),
            Message::Registered(_) => true,
            Message::None => false,
        };
    Ok(recording::CallerName { bytes: made.get_or_init(|| name_of(m, form.suffix)).as_bytes(), immutable })
}

/// The name of a message of unknown type.
const NO_MESSAGE: &str = "(no message)";

/// Look the region of message `m` in `form` up in the calling thread's name cache (by the
/// message's address and content; a registered string by its handle) with `$op` (and its
/// first arguments: `recording::push_named, key` to push it, `recording::named` for its id).
macro_rules! with_message {
    ($m:expr, $form:expr, $op:path $(, $arg:expr)*) => {{
        let (m, form): (&Message, Form) = ($m, $form);
        let made = std::cell::OnceCell::new();
        let s = form.suffix.as_bytes();
        match *m {
            Message::Ascii(p) => $op(
                $($arg,)*
                recording::name_token(p as usize, form.kind),
                // SAFETY: a NUL-terminated string of the program's.
                |c| unsafe { recording::c_equals_with_suffix(p, c, s) },
                || read_name(&made, m, form, 1),
            ),
            Message::Wide(p) => $op(
                $($arg,)*
                recording::name_token(p as usize, form.kind),
                // SAFETY: as above, wide.
                |c| unsafe { wide_equals_with_suffix(p, c, s) },
                || read_name(&made, m, form, 4),
            ),
            // Our own handle, never freed: its text never changes, so in a form of its own
            // it is trusted by its address alone.
            Message::Registered(reg) => $op(
                $($arg,)*
                recording::name_token(reg as *const Registered as usize, form.kind),
                |c| c.len() == reg.name.len() + s.len() && c.starts_with(reg.name.as_bytes()) && c.ends_with(s),
                || read_name(&made, m, form, 0),
            ),
            Message::None => $op(
                $($arg,)*
                recording::name_token(form.suffix.as_ptr() as usize ^ 1, form.kind),
                |c| c.len() == NO_MESSAGE.len() + s.len() && c.starts_with(NO_MESSAGE.as_bytes()) && c.ends_with(s),
                || read_name(&made, m, form, 0),
            ),
        }
    }};
}

/// The region of message `m` in `form` (registered at its first use), None when not recording.
fn message_region(m: &Message, form: Form) -> Option<u32> {
    catch_unwind(AssertUnwindSafe(|| with_message!(m, form, recording::named).ok().flatten())).ok().flatten()
}

// ---------------------------------------------------------------------------------------
// Push and pop.

/// The panic boundary of a push or pop: the closure captures a pointer or two and returns the
/// level, so that catching costs next to nothing (no result or message moved across it).
#[inline(always)]
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(-1)
}

/// Push the range of message `m` (None: refused, pushed all the same so that its pop pairs)
/// on the calling thread's stack of `domain` (0: the default domain): its level.
#[inline(always)]
fn push(domain: usize, m: Option<Message>, form: Form) -> c_int {
    let r = match m {
        Some(m) => with_message!(&m, form, recording::push_named, domain),
        None => recording::push_nothing(domain),
    };
    match r {
        Ok(level) => level.min(c_int::MAX as u32) as c_int,
        Err(_) => -1,
    }
}

/// Pop the calling thread's stack of `domain`: the popped range's level.
#[inline(always)]
fn pop(domain: usize) -> c_int {
    match recording::pop_pushed(domain) {
        Ok(recording::Popped::Level(level)) => level.min(c_int::MAX as u32) as c_int,
        Ok(recording::Popped::Empty) => {
            misuse("pop", "a range pop without a push on this thread");
            -1
        }
        _ => -1,
    }
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    guarded(|| if on() { push(0, ascii(message), PUSH) } else { -1 })
}

unsafe extern "C" fn range_push_w(message: *const i32) -> c_int {
    guarded(|| if on() { push(0, wide(message), PUSH) } else { -1 })
}

unsafe extern "C" fn range_push_ex(a: *const nvtxEventAttributes_t) -> c_int {
    // SAFETY: the program's attributes or NULL.
    guarded(|| if on() { push(0, unsafe { message_of(a) }, PUSH) } else { -1 })
}

unsafe extern "C" fn range_pop() -> c_int {
    guarded(|| if on() { pop(0) } else { -1 })
}

unsafe extern "C" fn domain_range_push_ex(d: *const c_void, a: *const nvtxEventAttributes_t) -> c_int {
    guarded(|| {
        if !on() {
            return -1;
        }
        // SAFETY: a handle of ours or NULL.
        let Some(dom) = (unsafe { domain(d) }) else { return push(d as usize, None, PUSH) };
        // SAFETY: the program's attributes or NULL.
        let m = unsafe { message_of(a) };
        push(d as usize, m, dom.map_or(PUSH, |d| d.push))
    })
}

unsafe extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    guarded(|| if on() { pop(d as usize) } else { -1 })
}

// ---------------------------------------------------------------------------------------
// Start and end (may end on another thread), marks.

/// A start/end range begins: its handle (0: not recorded).
fn range_start(m: Option<Message>, form: Form) -> u64 {
    let Some(m) = m else { return 0 };
    let Some(id) = message_region(&m, form) else { return 0 };
    catch_unwind(|| recording::range_start(id)).unwrap_or(0)
}

/// A start/end range ends, on whichever thread. The end of a range whose start was not
/// recorded (handle 0: a NULL message, said at the start) is no misuse.
fn range_stop(handle: u64) {
    if handle == 0 {
        return;
    }
    if let Ok(RangeEnd::NotOpen) = catch_unwind(|| recording::range_end(handle)) {
        misuse("end", &format!("an end of range {handle}, which is not open (ended already, or never started; counted as async_range_unknown_ends)"));
    }
}

fn mark(m: Option<Message>, form: Form) {
    let Some(m) = m else { return };
    if let Some(id) = message_region(&m, form) {
        let _ = catch_unwind(|| recording::instant(id));
    }
}

#[inline(always)]
fn ascii(p: *const c_char) -> Option<Message> {
    if p.is_null() {
        misuse("null-message", "a NULL message");
        return None;
    }
    Some(Message::Ascii(p))
}

#[inline(always)]
fn wide(p: *const i32) -> Option<Message> {
    if p.is_null() {
        misuse("null-message", "a NULL message");
        return None;
    }
    Some(Message::Wide(p))
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    if on() { range_start(ascii(message), RANGE) } else { 0 }
}

unsafe extern "C" fn range_start_w(message: *const i32) -> u64 {
    if on() { range_start(wide(message), RANGE) } else { 0 }
}

unsafe extern "C" fn range_start_ex(a: *const nvtxEventAttributes_t) -> u64 {
    // SAFETY: the program's attributes or NULL.
    if on() { range_start(unsafe { message_of(a) }, RANGE) } else { 0 }
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
    range_start(unsafe { message_of(a) }, dom.map_or(RANGE, |d| d.range))
}

unsafe extern "C" fn domain_range_end(_d: *const c_void, id: u64) {
    if on() {
        range_stop(id)
    }
}

unsafe extern "C" fn mark_a(message: *const c_char) {
    if on() {
        mark(ascii(message), MARK)
    }
}

unsafe extern "C" fn mark_w(message: *const i32) {
    if on() {
        mark(wide(message), MARK)
    }
}

unsafe extern "C" fn mark_ex(a: *const nvtxEventAttributes_t) {
    if on() {
        // SAFETY: the program's attributes or NULL.
        mark(unsafe { message_of(a) }, MARK)
    }
}

unsafe extern "C" fn domain_mark_ex(d: *const c_void, a: *const nvtxEventAttributes_t) {
    if !on() {
        return;
    }
    // SAFETY: a handle of ours or NULL; the program's attributes or NULL.
    let Some(dom) = (unsafe { domain(d) }) else { return };
    mark(unsafe { message_of(a) }, dom.map_or(MARK, |d| d.mark))
}

// ---------------------------------------------------------------------------------------
// Domains, registered strings, thread names.

fn create_domain(name: Option<Vec<u8>>) -> *const c_void {
    catch_unwind(|| {
        let k = DOMAINS.fetch_add(1, Ordering::Relaxed);
        if k >= MAX_DOMAINS {
            misuse("too-many-domains", &format!("more than {MAX_DOMAINS} domains created: later ones are the default domain"));
            return std::ptr::null();
        }
        let n = recording::region_name("NVTX", name.as_deref(), "");
        // Leaked with the domain, which lives as long as the process.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let (kind, unique) = (3 + 3 * (k % UNIQUE_DOMAINS) as u8, k < UNIQUE_DOMAINS);
        let d = Box::new(Domain {
            tag: DOMAIN_TAG,
            push: Form { suffix: leak(format!(" [{n}]")), kind, unique },
            range: Form { suffix: leak(format!(" [{n}, range]")), kind: kind + 1, unique },
            mark: Form { suffix: leak(format!(" [{n}, mark]")), kind: kind + 2, unique },
        });
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
        // A handle of ours or NULL (the string is named with the form of the call that uses
        // it: its domain's, as NVTX means it).
        // SAFETY: as the caller promises.
        if unsafe { domain(d) }.is_none() {
            return std::ptr::null();
        }
        if text.is_none() {
            misuse("null-string", "a NULL string to register");
            return std::ptr::null();
        }
        if STRINGS.fetch_add(1, Ordering::Relaxed) >= MAX_STRINGS {
            misuse("too-many-strings", &format!("more than {MAX_STRINGS} strings registered: later ones are refused"));
            return std::ptr::null();
        }
        let name = recording::region_name("NVTX", text.as_deref(), "");
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
