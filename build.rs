//! Generates the C header into OUT_DIR; the committed copy is include/scope_profiler.h
//! (tests/header_up_to_date.rs fails when it drifts; SCOPE_PROFILER_BLESS=1 rewrites it).

fn main() {
    let crate_dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // A SONAME, so programs linked against the library by path record its name, not the path.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libscope_profiler.so");
    cc::Build::new().file("src/tls.c").opt_level(2).compile("scope_profiler_tls");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate() {
        Ok(bindings) => {
            bindings.write_to_file(out_dir.join("scope_profiler.h"));
        }
        // rustc reports the syntax error itself, with a better message.
        Err(cbindgen::Error::ParseSyntaxError { .. }) => {}
        Err(e) => panic!("cbindgen: {e:?}"),
    }
}
