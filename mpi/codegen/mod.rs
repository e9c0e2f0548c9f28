//! The MPI-call wrappers, generated at build time for one MPI family from its own `mpi.h` (the
//! prototypes, with parameter names: `parse`) and from the symbols its libraries really export
//! (`symbols`), never written by hand and never committed.
//!
//! Derivation rules (docs/mpi.md lists them for users):
//! - C: every `MPI_X` that the header declares together with `PMPI_X`, and that the C library
//!   exports under both names, gets a wrapper `MPI_X` calling `PMPI_X`, except the exceptions
//!   below.
//! - Fortran (`mpif.h`/`use mpi`, and `use mpi_f08`): for each wrapped routine, the names its
//!   Fortran libraries export among `mpi_x`, `mpi_x_`, `mpi_x__`, `MPI_X` and `mpi_x_f08[_]`,
//!   `mpi_x_f08ts[_]` (large-count `MPI_X_c`: `mpi_x_f08[ts]_large_`). Names at one address are
//!   one function: one wrapper, exported under all of them. It takes the C parameters by
//!   reference, then `ierror` (for routines returning `int` in C; the others are Fortran
//!   functions returning the same type), then one hidden `size_t` length per character
//!   argument, and forwards them unchanged to the library's `pmpi_` twin of the same name
//!   form, or, where the library exports none (MPICH's `mpi_f08`), to the next definition of
//!   its own name (RTLD_NEXT).
//! - Exceptions: MPI_Init, MPI_Init_thread (set the profiler up after PMPI_Init; Fortran
//!   forms take no argc/argv), MPI_Finalize (writes the profile first), MPI_Abort (this rank
//!   writes its own file first), MPI_Pcontrol (variadic in C; switches recording); not
//!   wrapped: MPI_Wtime, MPI_Wtick (clock reads, so that the program's own timing is
//!   unperturbed), the handle conversions (`*_f2c`, `*_c2f`, `*_f082c`, ...) and the tool
//!   information interface (`MPI_T_*`).

pub mod parse;
pub mod semantics;
pub mod symbols;

use parse::{Class, Param, Proto};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What was generated.
pub struct Generated {
    pub source: PathBuf,
    pub c_routines: usize,
    pub fortran_functions: usize,
    pub fortran_names: usize,
    /// Things worth a cargo warning (routines timed only, missing Fortran libraries).
    pub notes: Vec<String>,
}

const SPECIAL: [&str; 5] = ["MPI_Init", "MPI_Init_thread", "MPI_Finalize", "MPI_Abort", "MPI_Pcontrol"];

/// Not wrapped at all.
pub fn excluded(name: &str) -> bool {
    name.starts_with("MPI_T_")
        || ["f2c", "c2f", "f082c", "c2f08", "f2f08", "f082f"].iter().any(|s| name.ends_with(s))
        || matches!(name, "MPI_Wtime" | "MPI_Wtick")
}

/// The Fortran names of routine `name` (C spelling), with the PMPI name of each.
fn fortran_candidates(name: &str) -> Vec<(String, String)> {
    let lower = name.to_ascii_lowercase();
    let upper = name.to_ascii_uppercase();
    let mut out = vec![
        (lower.clone(), format!("p{lower}")),
        (format!("{lower}_"), format!("p{lower}_")),
        (format!("{lower}__"), format!("p{lower}__")),
        (upper.clone(), format!("P{upper}")),
    ];
    for suffix in ["_f08", "_f08_", "_f08ts", "_f08ts_"] {
        out.push((format!("{lower}{suffix}"), format!("p{lower}{suffix}")));
    }
    if let Some(base) = lower.strip_suffix("_c") {
        for suffix in ["_f08_large_", "_f08ts_large_"] {
            out.push((format!("{base}{suffix}"), format!("p{base}{suffix}")));
        }
    }
    out
}

fn preprocess(cc: &str, dir: &Path) -> Result<String, String> {
    let probe = dir.join("mpi_h.c");
    std::fs::write(&probe, "#include <mpi.h>\n").map_err(|e| e.to_string())?;
    let o = Command::new(cc).arg("-E").arg(&probe).output().map_err(|e| format!("{cc} -E: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cc} -E <mpi.h> failed: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A binding's view of a parameter in the traffic templates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Binding {
    C,
    Fortran,
}

fn value(b: Binding, p: &Param, k: usize) -> String {
    match b {
        Binding::C => match p.class() {
            Class::Int | Class::Count | Class::Aint | Class::Offset => format!("(int64_t)({})", p.name),
            _ => p.name.clone(),
        },
        Binding::Fortran => match p.class() {
            Class::Int => format!("SP_FINT(a{k})"),
            Class::Count => format!("SP_FCOUNT(a{k})"),
            Class::Aint | Class::Offset => format!("SP_FAINT(a{k})"),
            Class::Type => format!("SP_TYPE_F2C(a{k})"),
            Class::Comm => format!("SP_COMM_F2C(a{k})"),
            Class::Win => format!("SP_WIN_F2C(a{k})"),
            _ => format!("a{k}"),
        },
    }
}

fn pointer(b: Binding, p: &Param, k: usize) -> String {
    match b {
        Binding::C => format!("(const void *)({})", p.name),
        Binding::Fortran => format!("(const void *)(a{k})"),
    }
}

/// Expand a template (see `semantics`) for one binding.
fn expand(t: &str, p: &Proto, b: Binding) -> String {
    let mut out = String::new();
    let chars: Vec<char> = t.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '$' | '&' | '%') && i + 1 < chars.len() {
            if c == '$' && chars[i + 1] == 'F' {
                out.push_str(if b == Binding::Fortran { "1" } else { "0" });
                i += 2;
                continue;
            }
            let digits: String = chars[i + 1..].iter().take_while(|d| d.is_ascii_digit()).collect();
            if !digits.is_empty() {
                let k: usize = digits.parse().unwrap();
                let param = &p.params[k];
                out.push_str(&match c {
                    '$' => value(b, param, k),
                    '&' => pointer(b, param, k),
                    _ => if param.class() == Class::CountPtr { "1".into() } else { "0".into() },
                });
                i += 1 + digits.len();
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The code after a successful call: communicator, traffic, created request.
fn post_code(p: &Proto, sem: Option<&semantics::Sem>, b: Binding) -> String {
    let mut code = String::new();
    if let Some(k) = p.params.iter().position(|x| x.class() == Class::Comm) {
        let _ = write!(code, "sp_comm_of(&e, {}); ", value(b, &p.params[k], k));
    } else if let Some(k) = p.params.iter().position(|x| x.class() == Class::Win) {
        let _ = write!(code, "sp_win(&e, {}); ", value(b, &p.params[k], k));
    }
    if let Some(s) = sem {
        code.push_str(&expand(s.post, p, b));
        code.push(' ');
    }
    let base = semantics::base_name(&p.name);
    if let Some(last) = p.params.last().filter(|l| l.is_request_out()) {
        if !semantics::is_completion(base) {
            let k = p.params.len() - 1;
            let _ = write!(code, "sp_request_out(&e, {}, {}, {}); ", pointer(b, last, k), (b == Binding::Fortran) as u8, base.ends_with("_init") as u8);
        }
    }
    code.trim_end().to_string()
}

fn emit_c(out: &mut String, p: &Proto, id: usize, sem: Option<&semantics::Sem>) {
    let params = if p.params.is_empty() { "void".to_string() } else { p.params.iter().map(Param::decl).collect::<Vec<_>>().join(", ") };
    let args = p.params.iter().map(|x| x.name.as_str()).collect::<Vec<_>>().join(", ");
    let name = &p.name;
    let _ = writeln!(out, "SP_EXPORT {} {name}({params}) {{", p.ret);
    let _ = writeln!(out, "    sp_mpi_event e;");
    let _ = writeln!(out, "    if (!sp_enter(&e, {id}, SP_SITE)) return P{name}({args});");
    if let Some(s) = sem {
        if s.reqbuf {
            let _ = writeln!(out, "    sp_reqbuf rb;");
        }
        if !s.pre.is_empty() {
            let _ = writeln!(out, "    {}", expand(s.pre, p, Binding::C));
        }
    }
    let _ = writeln!(out, "    {} rc = P{name}({args});", p.ret);
    if p.ret == "int" {
        let _ = writeln!(out, "    if (rc == MPI_SUCCESS) {{ {} }} else e.flags |= SP_EV_FAILED;", post_code(p, sem, Binding::C));
    }
    let _ = writeln!(out, "    sp_leave(&e);");
    if sem.is_some_and(|s| s.reqbuf) {
        let _ = writeln!(out, "    sp_req_release(&rb);");
    }
    let _ = writeln!(out, "    return rc;\n}}\n");
}

fn emit_c_special(out: &mut String, p: &Proto) {
    let params = if p.params.is_empty() { "void".to_string() } else { p.params.iter().map(Param::decl).collect::<Vec<_>>().join(", ") };
    let args = p.params.iter().map(|x| x.name.as_str()).collect::<Vec<_>>().join(", ");
    let name = &p.name;
    let variadic = if p.variadic { ", ..." } else { "" };
    let _ = writeln!(out, "SP_EXPORT int {name}({params}{variadic}) {{");
    match name.as_str() {
        "MPI_Init" | "MPI_Init_thread" => {
            let _ = writeln!(out, "    if (sp_depth) return P{name}({args});");
            let _ = writeln!(out, "    sp_depth = 1;\n    int64_t t0 = sp_clock_ns();\n    int rc = P{name}({args});\n    int64_t t1 = sp_clock_ns();\n    sp_depth = 0;");
            let _ = writeln!(out, "    if (rc == MPI_SUCCESS) sp_after_init(0, t1 - t0);\n    return rc;");
        }
        "MPI_Finalize" => {
            let _ = writeln!(out, "    int outer = !sp_depth;\n    if (outer) sp_before_finalize();\n    sp_depth++;\n    int64_t t0 = sp_clock_ns();\n    int rc = PMPI_Finalize();\n    int64_t t1 = sp_clock_ns();\n    sp_depth--;\n    if (outer) sp_after_finalize(t1 - t0);\n    return rc;");
        }
        "MPI_Abort" => {
            let code = &p.params[1].name;
            let _ = writeln!(out, "    if (!sp_depth) sp_before_abort({code});\n    return PMPI_Abort({args});");
        }
        "MPI_Pcontrol" => {
            let level = &p.params[0].name;
            let _ = writeln!(out, "    sp_pcontrol({level});\n    return PMPI_Pcontrol({level});");
        }
        _ => unreachable!(),
    }
    let _ = writeln!(out, "}}\n");
}

/// One Fortran function, exported under `names`.
fn emit_fortran(out: &mut String, p: &Proto, id: usize, fid: usize, names: &[String], pmpi: Option<&str>, sem: Option<&semantics::Sem>) {
    let n = p.params.len();
    let special = SPECIAL.contains(&p.name.as_str());
    // Parameters: the C ones by reference (the special routines: their Fortran forms).
    let ptr = |k: usize| ("void *".to_string(), format!("a{k}"));
    let mut decl: Vec<(String, String)> = match p.name.as_str() {
        "MPI_Init" | "MPI_Finalize" => vec![],
        "MPI_Init_thread" | "MPI_Abort" => vec![ptr(0), ptr(1)],
        "MPI_Pcontrol" => vec![ptr(0)],
        _ => (0..n).map(ptr).collect(),
    };
    let returns_int = p.ret == "int";
    if returns_int {
        decl.push(("MPI_Fint *".into(), "ierr".into()));
    }
    if !special {
        for (k, _) in p.params.iter().enumerate().filter(|(_, x)| x.class() == Class::Char) {
            decl.push(("size_t ".into(), format!("l{k}")));
        }
    }
    let args: Vec<&str> = decl.iter().map(|(_, n)| n.as_str()).collect();
    let types: Vec<&str> = decl.iter().map(|(t, _)| t.trim_end()).collect();
    let fret = if returns_int { "void".to_string() } else { p.ret.clone() };
    let f = format!("sp_f{fid}");
    let own = &names[0];
    let pmpi = pmpi.map_or("NULL".to_string(), |s| format!("\"{s}\""));
    let params = if decl.is_empty() { "void".to_string() } else { decl.iter().map(|(t, n)| format!("{t}{n}")).collect::<Vec<_>>().join(", ") };
    let ptypes = if types.is_empty() { "void".to_string() } else { types.join(", ") };
    let call = format!("f({})", args.join(", "));
    let ierr = if returns_int { "ierr" } else { "NULL" };
    let ret0 = if returns_int { "return;".to_string() } else { format!("return ({fret})0;") };
    let _ = writeln!(out, "static void *{f}_target;");
    let _ = writeln!(out, "{fret} {f}({params}) {{");
    let _ = writeln!(out, "    {fret} (*f)({ptypes}) = ({fret} (*)({ptypes}))sp_fortran_target(&{f}_target, {pmpi}, \"{own}\");");
    let _ = writeln!(out, "    if (!f) {{ sp_fortran_missing(\"{own}\", {ierr}); {ret0} }}");
    match p.name.as_str() {
        "MPI_Init" | "MPI_Init_thread" => {
            let _ = writeln!(out, "    if (sp_depth) {{ {call}; return; }}");
            let _ = writeln!(out, "    sp_depth = 1;\n    int64_t t0 = sp_clock_ns();\n    {call};\n    int64_t t1 = sp_clock_ns();\n    sp_depth = 0;");
            let _ = writeln!(out, "    if (SP_F_OK(ierr)) sp_after_init(1, t1 - t0);");
        }
        "MPI_Finalize" => {
            let _ = writeln!(out, "    int outer = !sp_depth;\n    if (outer) sp_before_finalize();\n    sp_depth++;\n    int64_t t0 = sp_clock_ns();\n    {call};\n    int64_t t1 = sp_clock_ns();\n    sp_depth--;\n    if (outer) sp_after_finalize(t1 - t0);");
        }
        "MPI_Abort" => {
            let _ = writeln!(out, "    if (!sp_depth && a1) sp_before_abort(*(const MPI_Fint *)a1);\n    {call};");
        }
        "MPI_Pcontrol" => {
            let _ = writeln!(out, "    if (a0) sp_pcontrol(*(const MPI_Fint *)a0);\n    {call};");
        }
        _ => {
            let _ = writeln!(out, "    sp_mpi_event e;");
            if returns_int {
                let _ = writeln!(out, "    if (!sp_enter(&e, {id}, SP_SITE)) {{ {call}; return; }}");
            } else {
                let _ = writeln!(out, "    if (!sp_enter(&e, {id}, SP_SITE)) return {call};");
            }
            if let Some(s) = sem {
                if s.reqbuf {
                    let _ = writeln!(out, "    sp_reqbuf rb;");
                }
                if !s.pre.is_empty() {
                    let _ = writeln!(out, "    {}", expand(s.pre, p, Binding::Fortran));
                }
            }
            if returns_int {
                let _ = writeln!(out, "    {call};");
                let _ = writeln!(out, "    if (SP_F_OK(ierr)) {{ {} }} else e.flags |= SP_EV_FAILED;", post_code(p, sem, Binding::Fortran));
            } else {
                let _ = writeln!(out, "    {fret} rv = {call};");
            }
            let _ = writeln!(out, "    sp_leave(&e);");
            if sem.is_some_and(|s| s.reqbuf) {
                let _ = writeln!(out, "    sp_req_release(&rb);");
            }
            if !returns_int {
                let _ = writeln!(out, "    return rv;");
            }
        }
    }
    let _ = writeln!(out, "}}");
    for name in names {
        let _ = writeln!(out, "extern __typeof({f}) {name} __attribute__((alias(\"{f}\"), visibility(\"default\")));");
    }
    out.push('\n');
}

const PRELUDE: &str = "/* Generated by mpi/codegen (scope_profiler) at build time: do not edit. */\n#define _GNU_SOURCE\n#include <stdlib.h>\n#include \"sp_pmpi.h\"\n#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n\n";

/// The wrappers for the MPI family whose C compiler wrapper is `cc`, written to `dir`.
pub fn generate(cc: &str, dir: &Path) -> Result<Generated, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let protos: BTreeMap<String, Proto> = parse::prototypes(&preprocess(cc, dir)?).into_iter().map(|p| (p.name.clone(), p)).collect();
    let c_libs = symbols::mpi_libraries(cc)?;
    let c_exports = symbols::exports(&c_libs)?;
    let mut notes = Vec::new();
    let selected: Vec<&Proto> = protos
        .values()
        .filter(|p| p.name.starts_with("MPI_") && !excluded(&p.name))
        .filter(|p| protos.contains_key(&format!("P{}", p.name)))
        .filter(|p| c_exports.has(&p.name) && c_exports.has(&format!("P{}", p.name)))
        .filter(|p| !p.variadic || p.name == "MPI_Pcontrol")
        .collect();
    if !SPECIAL.iter().all(|s| selected.iter().any(|p| p.name == *s)) {
        return Err(format!("{cc}: the MPI library lacks one of {SPECIAL:?} (or its PMPI twin)"));
    }
    let mut src = String::from(PRELUDE);
    let _ = writeln!(src, "const char *const sp_routine_names[] = {{");
    for p in &selected {
        let _ = writeln!(src, "    \"{}\",", p.name);
    }
    let _ = writeln!(src, "}};\nconst uint32_t sp_routine_count = {};\n", selected.len());

    let mut sems = Vec::new();
    for p in &selected {
        let s = match semantics::of(p) {
            Ok(s) => s,
            Err(e) => {
                notes.push(format!("{e}: timed, bytes not counted"));
                None
            }
        };
        sems.push(s);
    }
    for (id, p) in selected.iter().enumerate() {
        if SPECIAL.contains(&p.name.as_str()) {
            emit_c_special(&mut src, p);
        } else {
            emit_c(&mut src, p, id, sems[id].as_ref());
        }
    }

    // Fortran: the MPI libraries of the family's Fortran wrapper that the C one does not link.
    let (mut functions, mut fnames) = (0, 0);
    let fortran_libs = match symbols::fortran_wrapper(cc) {
        None => {
            notes.push(format!("no Fortran compiler wrapper next to {cc}: Fortran MPI calls are not wrapped"));
            Vec::new()
        }
        Some(fc) => match symbols::mpi_libraries(&fc) {
            Ok(libs) => libs.into_iter().filter(|l| !c_libs.contains(l)).collect(),
            Err(e) => {
                notes.push(format!("{e}: Fortran MPI calls are not wrapped"));
                Vec::new()
            }
        },
    };
    // The wrappers load these when the program's link dropped them (--as-needed: every Fortran
    // MPI symbol the program uses is defined by the plugin, which comes first).
    let _ = writeln!(src, "const char *const sp_fortran_libraries[] = {{");
    for l in &fortran_libs {
        let _ = writeln!(src, "    \"{}\",", symbols::soname(l));
    }
    let _ = writeln!(src, "    NULL\n}};\n");
    if !fortran_libs.is_empty() {
        let f_exports = symbols::exports(&fortran_libs)?;
        for (id, p) in selected.iter().enumerate() {
            // Names at one address are one function.
            let mut groups: BTreeMap<(usize, u64), Vec<(String, String)>> = BTreeMap::new();
            for (name, pmpi) in fortran_candidates(&p.name) {
                if c_exports.has(&name) {
                    continue;
                }
                if let Some(at) = f_exports.get(&name) {
                    groups.entry(at).or_default().push((name, pmpi));
                }
            }
            for names in groups.values() {
                let pmpi = names.iter().map(|(_, p)| p.as_str()).find(|p| f_exports.has(p));
                let own: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
                emit_fortran(&mut src, p, id, functions, &own, pmpi, sems[id].as_ref());
                functions += 1;
                fnames += own.len();
            }
        }
    }
    let source = dir.join("sp_wrappers.c");
    std::fs::write(&source, src).map_err(|e| e.to_string())?;
    Ok(Generated { source, c_routines: selected.len(), fortran_functions: functions, fortran_names: fnames, notes })
}

/// The wrappers' file when nothing can be generated: no wrappers, an empty routine table.
pub fn stub(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let source = dir.join("sp_wrappers.c");
    let text = format!("{PRELUDE}const char *const sp_routine_names[] = {{ \"MPI_Init\" }};\nconst uint32_t sp_routine_count = 0;\nconst char *const sp_fortran_libraries[] = {{ NULL }};\n");
    std::fs::write(&source, text).map_err(|e| e.to_string())?;
    Ok(source)
}
