//! `#[repr(C)]` copies of the LIKWID structs we read fields from (likwid.h). Identical in
//! 5.2.2 and 5.5.1 (5.5 only adds `const` to `CpuInfo::name`/`short_name`); the e2e test
//! `likwid_sys_matches_both_versions` compares every offset with both headers.

use std::ffi::{c_char, c_int};

/// `CpuInfo` (likwid.h 5.2.2, `get_cpuInfo()`); we read `short_name` (the perfgroup arch).
#[repr(C)]
pub struct CpuInfo {
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
    pub vendor: u32,
    pub part: u32,
    pub clock: u64,
    pub turbo: c_int,
    pub osname: *mut c_char,
    pub name: *mut c_char,
    pub short_name: *mut c_char,
    pub features: *mut c_char,
    pub is_intel: c_int,
    pub architecture: [c_char; 20],
    pub support_uncore: c_int,
    pub support_clientmem: c_int,
    pub feature_flags: u64,
    pub perf_version: u32,
    pub perf_num_ctr: u32,
    pub perf_width_ctr: u32,
    pub perf_num_fixed_ctr: u32,
}

/// `Likwid_Configuration` (likwid.h 5.2.2, `get_configuration()`); we read `group_path`.
#[repr(C)]
pub struct LikwidConfiguration {
    pub config_file_name: *mut c_char,
    pub topology_cfg_file_name: *mut c_char,
    pub daemon_path: *mut c_char,
    pub group_path: *mut c_char,
    /// `AccessMode` enum (int).
    pub daemon_mode: c_int,
    pub max_num_threads: c_int,
    pub max_num_nodes: c_int,
}

/// `CpuTopology` (likwid.h 5.2.2, `get_cpuTopology()`); the leading fields only.
#[repr(C)]
pub struct CpuTopology {
    pub num_hw_threads: u32,
    pub active_hw_threads: u32,
    pub num_sockets: u32,
    pub num_dies: u32,
    pub num_cores_per_socket: u32,
    pub num_threads_per_core: u32,
    pub num_cache_levels: u32,
    pub thread_pool: *mut std::ffi::c_void,
    pub cache_levels: *mut std::ffi::c_void,
    pub topology_tree: *mut std::ffi::c_void,
}

/// `NumaTopology` (likwid.h 5.2.2, `get_numaTopology()`).
#[repr(C)]
pub struct NumaTopology {
    pub number_of_nodes: u32,
    pub nodes: *mut std::ffi::c_void,
}
