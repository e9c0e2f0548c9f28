//! The Kokkos tools interface (`impl/Kokkos_Profiling_C_Interface.h`; kokkos-tools'
//! `profiling/all/kp_core.hpp`): Kokkos dlopens the library named by `KOKKOS_PROFILE_LIBRARY`
//! (Kokkos 3.x) or `KOKKOS_TOOLS_LIBS` / `--kokkos-tools-libs=` (Kokkos >= 3.7 and 4.x) and
//! looks each `kokkosp_*` callback up by name. Every callback catches panics and checks its
//! arguments here; the regions enter the recording through `adapters`.
//!
//! Recorded: kernels as regions named `<label> [for]`, `[reduce]`, `[scan]` (with the
//! execution space where the interface version encodes it: `<label> [for, Cuda]`), fences
//! `<label> [fence]`, profile regions by their name, profile sections by their name, deep
//! copies `deep_copy <dst label> <- <src label> [<dst space> <- <src space>]` with their bytes,
//! events `<name> [event]` as instant events, and per memory space the bytes allocated now,
//! their high-water mark and the total allocated (rank attributes
//! `counter:kokkos_bytes:<space>`, `counter_max:kokkos_bytes:<space>`,
//! `counter:kokkos_allocated_bytes:<space>`). `SCOPE_PROFILER_KOKKOS=0` turns it off.

#![allow(non_camel_case_types)]

use super::{self as recording, NOT_RECORDED, Stack};
use crate::warn;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The switch for this adapter.
pub const ENV: &str = "SCOPE_PROFILER_KOKKOS";
/// The oldest interface version we know (Kokkos 2.x's first tools interface), and the first
/// that encodes the execution space in a kernel's device id.
const OLDEST_VERSION: u64 = 20150628;
const SPACE_IN_DEVICE_ID: u64 = 20211015;
/// A date far beyond any Kokkos: a larger "version" is garbage.
const NEWEST_VERSION: u64 = 29991231;
/// A kernel or fence that recorded nothing (its end is ignored).
const NO_KERNEL: u64 = u64::MAX;
/// More memory spaces than any program has; later ones are pooled.
const MAX_SPACES: usize = 64;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Kokkos_Profiling_SpaceHandle {
    pub name: [c_char; 64],
}

#[repr(C)]
pub struct Kokkos_Tools_ToolSettings {
    pub requires_global_fencing: bool,
    pub padding: [bool; 255],
}

static ON: AtomicBool = AtomicBool::new(false);
/// The interface version Kokkos gave at init.
static VERSION: AtomicU64 = AtomicU64::new(0);
/// This adapter set the run up (so it writes it at `kokkosp_finalize_library`).
static SET_UP_HERE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The thread's open profile regions and deep copies (their stops name none).
    static REGIONS: RefCell<Stack> = const { RefCell::new(Stack::new()) };
    static COPIES: RefCell<Stack> = const { RefCell::new(Stack::new()) };
}

/// Whether the adapter records (Kokkos initialized it, not switched off).
#[inline(always)]
fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Kokkos's first call: check the interface version, set profiling up unless the program
/// did (or MPI_Init did).
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_init_library(_load_seq: c_int, interface_ver: u64, _dev_info_count: u32, _device_info: *mut c_void) {
    let _ = catch_unwind(|| {
        if recording::switched_off_by_env(ENV) || recording::another_copy_is_used() {
            return;
        }
        if !(OLDEST_VERSION..=NEWEST_VERSION).contains(&interface_ver) {
            warn::once("kokkos-version", &format!("Kokkos gave the tools interface version {interface_ver}, which no Kokkos has: Kokkos kernels and regions are not recorded"));
            return;
        }
        VERSION.store(interface_ver, Ordering::Relaxed);
        if recording::not_set_up() {
            match recording::set_up(recording::ImplicitOrigin::KokkosTool) {
                Ok(crate::status::Status::Ok) => SET_UP_HERE.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(e) => {
                    warn::once("implicit-setup-failed", &format!("setting profiling up for Kokkos failed: {e}"));
                    return;
                }
            }
        }
        recording::note_source("kokkos", &format!("Kokkos tools interface, version {interface_ver}"));
        ON.store(true, Ordering::Release);
    });
}

/// Kokkos::finalize: a run this adapter set up is written now, unless MPI is in use (then
/// `MPI_Finalize` or the exit writes it, for every rank together).
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_finalize_library() {
    let _ = catch_unwind(|| {
        if !ON.swap(false, Ordering::AcqRel) {
            return;
        }
        if SET_UP_HERE.load(Ordering::Relaxed) && !crate::mpi_comm::is_usable() {
            if let Err(e) = recording::write_now() {
                warn::always(&format!("writing the profile at Kokkos::finalize failed: {e}"));
            }
        }
    });
}

/// Newer Kokkos asks what the tool needs: no global fences.
// Kokkos calls it with pointers its interface makes valid (or null, checked): not ours to
// mark unsafe, since no Rust code calls it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_request_tool_settings(num_actions: u32, settings: *mut Kokkos_Tools_ToolSettings) {
    if settings.is_null() || num_actions == 0 {
        return;
    }
    // SAFETY: Kokkos's settings structure, ours to fill for this call.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (*settings).requires_global_fencing = false }));
}

/// The suffix of a kernel's region: its kind, and its execution space where Kokkos encodes
/// it in the device id (the top 8 bits: Kokkos::Tools::Experimental::DeviceType); and the
/// kind of its name-cache key (`adapters::name_token`: one per suffix, 0 is none's).
#[inline(always)]
fn kernel_suffix(kind: usize, dev_id: u32) -> (&'static str, u8) {
    const TABLE: [[&str; 11]; 4] = {
        macro_rules! row {
            ($k:literal) => {
                [
                    concat!(" [", $k, "]"),
                    concat!(" [", $k, ", Serial]"),
                    concat!(" [", $k, ", OpenMP]"),
                    concat!(" [", $k, ", Cuda]"),
                    concat!(" [", $k, ", HIP]"),
                    concat!(" [", $k, ", OpenMPTarget]"),
                    concat!(" [", $k, ", HPX]"),
                    concat!(" [", $k, ", Threads]"),
                    concat!(" [", $k, ", SYCL]"),
                    concat!(" [", $k, ", OpenACC]"),
                    concat!(" [", $k, ", Unknown]"),
                ]
            };
        }
        [row!("for"), row!("reduce"), row!("scan"), row!("fence")]
    };
    let space = if VERSION.load(Ordering::Relaxed) >= SPACE_IN_DEVICE_ID { ((dev_id >> 24) as usize).min(9) + 1 } else { 0 };
    (TABLE[kind][space], (1 + kind * 11 + space) as u8)
}

/// A kernel or fence begins: a region of its label, started on the calling thread; its id
/// goes back to Kokkos for the end.
#[inline(always)]
fn begin(kind: usize, name: *const c_char, dev_id: u32, kid: *mut u64) {
    if kid.is_null() {
        return;
    }
    let mut id = NO_KERNEL;
    if on() {
        let (suffix, key_kind) = kernel_suffix(kind, dev_id);
        id = start_label(name, suffix, key_kind).map_or(NO_KERNEL, u64::from);
    }
    // SAFETY: Kokkos's handle word for this kernel.
    unsafe { *kid = id };
}

/// Start the region `<name><suffix>` (cached by the name's address, `kind`, and content).
#[inline(always)]
fn start_label(name: *const c_char, suffix: &'static str, kind: u8) -> Option<u32> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if name.is_null() {
            let n = recording::region_name("Kokkos", None, suffix);
            return recording::register(n.as_bytes()).ok().filter(|_| !recording::switched_off()).and_then(|id| recording::start(id).ok().map(|_| id));
        }
        let made = std::cell::OnceCell::new();
        let read = || {
            // SAFETY: Kokkos passes a NUL-terminated label.
            let n = made.get_or_init(|| recording::region_name("Kokkos", unsafe { recording::c_bytes(name) }, suffix));
            Ok(recording::CallerName { bytes: n.as_bytes(), immutable: false })
        };
        // SAFETY: as above.
        recording::start_named(recording::name_token(name as usize, kind), |cached| unsafe { recording::c_equals_with_suffix(name, cached, suffix.as_bytes()) }, read).ok().flatten()
    }));
    r.ok().flatten()
}

#[inline(always)]
fn end(kid: u64) {
    if kid == NO_KERNEL || kid > u32::MAX as u64 {
        return;
    }
    let _ = catch_unwind(|| recording::stop(kid as u32));
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_begin_parallel_for(name: *const c_char, dev_id: u32, kid: *mut u64) {
    begin(0, name, dev_id, kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_end_parallel_for(kid: u64) {
    end(kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_begin_parallel_reduce(name: *const c_char, dev_id: u32, kid: *mut u64) {
    begin(1, name, dev_id, kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_end_parallel_reduce(kid: u64) {
    end(kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_begin_parallel_scan(name: *const c_char, dev_id: u32, kid: *mut u64) {
    begin(2, name, dev_id, kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_end_parallel_scan(kid: u64) {
    end(kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_begin_fence(name: *const c_char, dev_id: u32, kid: *mut u64) {
    begin(3, name, dev_id, kid)
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_end_fence(kid: u64) {
    end(kid)
}

/// `Kokkos::Profiling::pushRegion(name)`: a region of that name on the calling thread.
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_push_profile_region(name: *const c_char) {
    if !on() {
        return;
    }
    let id = start_label(name, "", 0).unwrap_or(NOT_RECORDED);
    let _ = REGIONS.try_with(|s| s.try_borrow_mut().map(|mut s| s.push(id)));
}

/// `popRegion()`: the calling thread's innermost profile region ends.
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_pop_profile_region() {
    if !on() {
        return;
    }
    match REGIONS.try_with(|s| s.try_borrow_mut().map_or(Some(NOT_RECORDED), |mut s| s.pop())) {
        Ok(Some(NOT_RECORDED)) | Err(_) => {}
        Ok(Some(id)) => {
            let _ = catch_unwind(|| recording::stop(id));
        }
        Ok(None) => warn::once("kokkos-pop", "Kokkos: popRegion without a pushRegion on this thread: ignored"),
    }
}

/// A profile section is created: a region of its name, whose id is the section's.
// Kokkos calls it with pointers its interface makes valid (or null, checked): not ours to
// mark unsafe, since no Rust code calls it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_create_profile_section(name: *const c_char, sec_id: *mut u32) {
    if sec_id.is_null() {
        return;
    }
    let id = if on() {
        catch_unwind(|| {
            // SAFETY: Kokkos passes a NUL-terminated name or NULL.
            let n = recording::region_name("Kokkos", unsafe { recording::c_bytes(name) }, "");
            recording::register(n.as_bytes()).ok().filter(|_| !recording::switched_off())
        })
        .ok()
        .flatten()
        .unwrap_or(NOT_RECORDED)
    } else {
        NOT_RECORDED
    };
    // SAFETY: Kokkos's word for the section's id.
    unsafe { *sec_id = id };
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_start_profile_section(sec_id: u32) {
    if on() && sec_id != NOT_RECORDED {
        let _ = catch_unwind(|| recording::start(sec_id));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_stop_profile_section(sec_id: u32) {
    if on() && sec_id != NOT_RECORDED {
        let _ = catch_unwind(|| recording::stop(sec_id));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_destroy_profile_section(_sec_id: u32) {}

/// `Kokkos::Profiling::markEvent(name)`: an instant event `<name> [event]`.
// Kokkos calls it with pointers its interface makes valid (or null, checked): not ours to
// mark unsafe, since no Rust code calls it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_profile_event(name: *const c_char) {
    if !on() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: Kokkos passes a NUL-terminated name or NULL.
        let n = recording::region_name("Kokkos", unsafe { recording::c_bytes(name) }, " [event]");
        if let Ok(id) = recording::register(n.as_bytes()) {
            recording::instant(id);
        }
    });
}

/// `Kokkos::Tools::declareMetadata(key, value)`: a rank attribute `kokkos:<key>`.
// Kokkos calls it with pointers its interface makes valid (or null, checked): not ours to
// mark unsafe, since no Rust code calls it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_declare_metadata(key: *const c_char, value: *const c_char) {
    if !on() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: Kokkos passes NUL-terminated strings or NULL.
        let (Some(k), Some(v)) = (unsafe { recording::c_bytes(key) }, unsafe { recording::c_bytes(value) }) else { return };
        let (k, v) = (String::from_utf8_lossy(k), String::from_utf8_lossy(v));
        if k == "Kokkos Version" {
            recording::note_source("kokkos", &format!("Kokkos {v} (tools interface version {})", VERSION.load(Ordering::Relaxed)));
        }
        recording::note(&format!("kokkos:{k}"), &v);
    });
}

fn space_name(h: &Kokkos_Profiling_SpaceHandle) -> String {
    let bytes: Vec<u8> = h.name.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    let s = String::from_utf8_lossy(&bytes).into_owned();
    if s.is_empty() { "(unnamed space)".into() } else { s }
}

/// Per memory space: bytes allocated now, and the total ever allocated.
static SPACES: Mutex<Vec<(String, u64, u64)>> = Mutex::new(Vec::new());

fn account(space: &Kokkos_Profiling_SpaceHandle, size: u64, allocate: bool) {
    let name = space_name(space);
    let mut spaces = SPACES.lock();
    let i = match spaces.iter().position(|s| s.0 == name) {
        Some(i) => i,
        None if spaces.len() < MAX_SPACES => {
            spaces.push((name, 0, 0));
            spaces.len() - 1
        }
        None => return,
    };
    let s = &mut spaces[i];
    if allocate {
        s.1 = s.1.saturating_add(size);
        s.2 = s.2.saturating_add(size);
        recording::counter(&format!("kokkos_allocated_bytes:{}", s.0), s.2.min(i64::MAX as u64) as i64);
    } else {
        s.1 = s.1.saturating_sub(size);
    }
    recording::counter(&format!("kokkos_bytes:{}", s.0), s.1.min(i64::MAX as u64) as i64);
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_allocate_data(space: Kokkos_Profiling_SpaceHandle, _label: *const c_char, _ptr: *const c_void, size: u64) {
    if on() {
        let _ = catch_unwind(|| account(&space, size, true));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_deallocate_data(space: Kokkos_Profiling_SpaceHandle, _label: *const c_char, _ptr: *const c_void, size: u64) {
    if on() {
        let _ = catch_unwind(|| account(&space, size, false));
    }
}

/// A deep copy: a region `deep_copy <dst> <- <src> [<dst space> <- <src space>]` with its
/// bytes, on the calling thread until `kokkosp_end_deep_copy`.
// Kokkos calls it with pointers its interface makes valid (or null, checked): not ours to
// mark unsafe, since no Rust code calls it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_begin_deep_copy(
    dst_space: Kokkos_Profiling_SpaceHandle,
    dst_name: *const c_char,
    _dst_ptr: *const c_void,
    src_space: Kokkos_Profiling_SpaceHandle,
    src_name: *const c_char,
    _src_ptr: *const c_void,
    size: u64,
) {
    if !on() {
        return;
    }
    let id = catch_unwind(|| {
        // SAFETY: Kokkos passes NUL-terminated labels or NULL.
        let (d, s) = unsafe { (recording::c_bytes(dst_name), recording::c_bytes(src_name)) };
        let label = |b: Option<&[u8]>| match b {
            Some(b) if !b.is_empty() => String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned(),
            _ => "(unnamed)".into(),
        };
        let n = format!("deep_copy {} <- {} [{} <- {}]", label(d), label(s), space_name(&dst_space), space_name(&src_space));
        let id = recording::register(n.as_bytes()).ok().filter(|_| !recording::switched_off())?;
        recording::start(id).ok()?;
        recording::add_bytes(id, size);
        Some(id)
    })
    .ok()
    .flatten()
    .unwrap_or(NOT_RECORDED);
    let _ = COPIES.try_with(|s| s.try_borrow_mut().map(|mut s| s.push(id)));
}

#[unsafe(no_mangle)]
pub extern "C" fn kokkosp_end_deep_copy() {
    if !on() {
        return;
    }
    if let Ok(Some(id)) = COPIES.try_with(|s| s.try_borrow_mut().map_or(Some(NOT_RECORDED), |mut s| s.pop())) {
        if id != NOT_RECORDED {
            let _ = catch_unwind(|| recording::stop(id));
        }
    }
}
