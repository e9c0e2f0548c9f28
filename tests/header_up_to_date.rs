//! The committed include/scope_profiler.h must equal what cbindgen generates from src/ffi.rs.
//! `SCOPE_PROFILER_BLESS=1 cargo test --test header_up_to_date` rewrites it.

#[test]
fn committed_header_matches_generated() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/scope_profiler.h"));
    let committed_path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/scope_profiler.h");
    if std::env::var_os("SCOPE_PROFILER_BLESS").is_some() {
        std::fs::write(committed_path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/scope_profiler.h is out of date with src/ffi.rs: run `SCOPE_PROFILER_BLESS=1 cargo test --test header_up_to_date` and commit it"
    );
}
