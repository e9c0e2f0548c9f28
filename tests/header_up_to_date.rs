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

/// The public header defines only `SP_*` and `SCOPE_PROFILER_*` names: internal constants of
/// the Rust modules (cbindgen:ignore in src/lib.rs) must never leak into users' C namespace.
#[test]
fn header_defines_only_prefixed_names() {
    let header = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/include/scope_profiler.h"));
    for line in header.lines() {
        if let Some(rest) = line.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            // sp_*: the compile-time switch (SP_DISABLE) maps the functions to inline no-ops.
            assert!(
                name.starts_with("SP_") || name.starts_with("SCOPE_PROFILER_") || name.starts_with("sp_"),
                "unprefixed macro in the header: {line}"
            );
        }
        for word in ["typedef struct ", "typedef enum "] {
            if let Some(rest) = line.strip_prefix(word) {
                assert!(rest.starts_with("sp_"), "unprefixed type in the header: {line}");
            }
        }
    }
}
