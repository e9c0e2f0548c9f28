//! The prototypes of a preprocessed `mpi.h` (`<mpicc> -E`): every `MPI_*`/`PMPI_*` function
//! declaration with its return type and parameters (type and name, as the header writes them).

/// One parameter: its declaration split into the type part and the name (arrays keep their
/// brackets in `suffix`: `int ranges[][3]` is `int` + `ranges` + `[][3]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub ty: String,
    pub name: String,
    pub suffix: String,
    /// The header gave no name (one was made up: `a<i>`).
    pub unnamed: bool,
}

impl Param {
    /// As a C declaration.
    pub fn decl(&self) -> String {
        format!("{} {}{}", self.ty, self.name, self.suffix)
    }

    /// The type without qualifiers and spaces, and how many levels of pointer or array it has.
    pub fn base(&self) -> (String, usize) {
        let mut depth = self.ty.matches('*').count() + self.suffix.matches('[').count();
        let words: Vec<&str> = self.ty.split(|c: char| c.is_whitespace() || c == '*').filter(|w| !w.is_empty() && *w != "const" && *w != "volatile" && *w != "restrict" && *w != "__restrict").collect();
        if words.is_empty() {
            depth = 0;
        }
        (words.join(" "), depth)
    }

    /// What the parameter is, for the wrappers' traffic code and the Fortran bindings.
    pub fn class(&self) -> Class {
        let (base, depth) = self.base();
        match (base.as_str(), depth) {
            ("int", 0) => Class::Int,
            ("int", _) => Class::IntPtr,
            ("MPI_Count", 0) => Class::Count,
            ("MPI_Count", _) => Class::CountPtr,
            ("MPI_Aint", 0) => Class::Aint,
            ("MPI_Offset", 0) => Class::Offset,
            ("MPI_Datatype", 0) => Class::Type,
            ("MPI_Datatype", _) => Class::TypePtr,
            ("MPI_Comm", 0) => Class::Comm,
            ("MPI_Win", 0) => Class::Win,
            ("MPI_File", 0) => Class::File,
            ("MPI_Request", 1) => Class::RequestPtr,
            ("MPI_Status", 1) => Class::StatusPtr,
            ("void", 1) => Class::Buf,
            ("char", d) if d >= 1 => Class::Char,
            _ => Class::Other,
        }
    }

    /// A single `MPI_Request *` (not an array): the request a call creates.
    pub fn is_request_out(&self) -> bool {
        self.class() == Class::RequestPtr && self.suffix.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Int,
    IntPtr,
    Count,
    CountPtr,
    Aint,
    Offset,
    Type,
    TypePtr,
    Comm,
    Win,
    File,
    RequestPtr,
    StatusPtr,
    Buf,
    Char,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proto {
    pub ret: String,
    pub name: String,
    pub params: Vec<Param>,
    pub variadic: bool,
}

/// Remove `__attribute__((...))`, `__asm__(...)` and friends (balanced parentheses).
fn strip_attributes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &s[i..];
        let kw = ["__attribute__", "__asm__", "__asm", "__declspec"].into_iter().find(|k| {
            rest.starts_with(k) && !rest[k.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_') && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        });
        if let Some(k) = kw {
            let mut j = i + k.len();
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < b.len() && b[j] == b'(' {
                let mut depth = 0usize;
                while j < b.len() {
                    match b[j] {
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                j += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            out.push(' ');
            i = j;
            continue;
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Top-level statements: up to a `;` outside parentheses and braces; a `{...}` body at the top
/// level ends its statement (and marks it as a definition, which is skipped).
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut paren, mut brace) = (0i32, 0i32);
    let mut in_body = false;
    for c in text.chars() {
        match c {
            '(' => paren += 1,
            ')' => paren -= 1,
            '{' => {
                brace += 1;
                in_body = true;
            }
            '}' => {
                brace -= 1;
                if brace == 0 {
                    cur.clear();
                    in_body = false;
                    continue;
                }
            }
            ';' if paren == 0 && brace == 0 => {
                if !in_body {
                    out.push(std::mem::take(&mut cur));
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        if brace == 0 && !in_body {
            cur.push(c);
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A word that names a type, not a parameter.
fn is_type_word(w: &str) -> bool {
    matches!(w, "int" | "char" | "void" | "double" | "float" | "long" | "short" | "unsigned" | "signed" | "const" | "size_t")
        || w.starts_with("MPI_")
        || w.starts_with("MPIX_")
        || w.starts_with("PMPI_")
}

fn param(text: &str, index: usize) -> Option<Param> {
    let t = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.contains('(') {
        return None; // a function pointer written out: not in the MPI headers we know
    }
    let (head, suffix) = match t.find('[') {
        Some(p) => (t[..p].trim_end().to_string(), t[p..].replace(' ', "")),
        None => (t.clone(), String::new()),
    };
    // The last identifier of the head is the name, unless it is a type word.
    let split = head.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
    let (ty, name) = (head[..split].trim_end(), &head[split..]);
    if is_ident(name) && !ty.is_empty() && !is_type_word(name) {
        return Some(Param { ty: ty.to_string(), name: name.to_string(), suffix, unnamed: false });
    }
    Some(Param { ty: head.clone(), name: format!("a{index}"), suffix, unnamed: true })
}

/// Every MPI and PMPI function prototype in a preprocessed header.
pub fn prototypes(preprocessed: &str) -> Vec<Proto> {
    let text: String = preprocessed.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let text = strip_attributes(&text);
    let mut out = Vec::new();
    for st in statements(&text) {
        let st = st.split_whitespace().collect::<Vec<_>>().join(" ");
        if st.starts_with("typedef") || !st.ends_with(')') {
            continue;
        }
        let Some(open) = st.find('(') else { continue };
        let before = st[..open].trim_end();
        let split = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
        let (ret, name) = (before[..split].trim(), &before[split..]);
        if !(name.starts_with("MPI_") || name.starts_with("PMPI_")) || ret.is_empty() {
            continue;
        }
        let ret = ret.split_whitespace().filter(|w| !matches!(*w, "extern" | "static" | "inline" | "__inline" | "__inline__")).collect::<Vec<_>>().join(" ");
        let inner = &st[open + 1..st.len() - 1];
        // Split on top-level commas.
        let mut parts = Vec::new();
        let (mut depth, mut cur) = (0i32, String::new());
        for c in inner.chars() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(std::mem::take(&mut cur));
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        parts.push(cur);
        let parts: Vec<String> = parts.into_iter().map(|p| p.trim().to_string()).collect();
        let mut variadic = false;
        let mut params = Vec::new();
        let mut ok = true;
        for (i, p) in parts.iter().enumerate() {
            if p == "..." {
                variadic = true;
            } else if p == "void" && parts.len() == 1 || p.is_empty() && parts.len() == 1 {
            } else if let Some(param) = param(p, i) {
                params.push(param);
            } else {
                ok = false;
            }
        }
        if ok {
            out.push(Proto { ret, name: name.to_string(), params, variadic });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_families_styles() {
        let ompi = r#"
# 1 "mpi.h"
typedef struct ompi_communicator_t *MPI_Comm;
typedef int (MPI_Copy_function)(MPI_Comm, int, void *, void *, void *, int *);
__attribute__((visibility("default"))) int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest,
                            int tag, MPI_Comm comm);
__attribute__((visibility("default"))) double MPI_Wtime(void);
__attribute__((visibility("default"))) int MPI_Pcontrol(const int level, ...);
__attribute__((visibility("default"))) int MPI_Cart_create(MPI_Comm old_comm, int ndims, const int dims[],
                                   const int periods[], int reorder, MPI_Comm *comm_cart);
__attribute__((visibility("default"))) int MPI_Comm_spawn_multiple(int count, char *array_of_commands[], char **array_of_argv[],
                                           const int array_of_maxprocs[], const MPI_Info array_of_info[],
                                           int root, MPI_Comm comm, MPI_Comm *intercomm,
                                           int array_of_errcodes[]);
extern MPI_Fint *MPI_F_STATUS_IGNORE;
static inline int helper(int x) { return x; }
"#;
        let p = prototypes(ompi);
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["MPI_Send", "MPI_Wtime", "MPI_Pcontrol", "MPI_Cart_create", "MPI_Comm_spawn_multiple"]);
        let send = &p[0];
        assert_eq!(send.ret, "int");
        assert_eq!(send.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["buf", "count", "datatype", "dest", "tag", "comm"]);
        assert_eq!(send.params.iter().map(|p| p.class()).collect::<Vec<_>>(), [Class::Buf, Class::Int, Class::Type, Class::Int, Class::Int, Class::Comm]);
        assert_eq!(p[1].ret, "double");
        assert!(p[1].params.is_empty());
        assert!(p[2].variadic);
        assert_eq!(p[3].params[2].decl(), "const int dims[]");
        assert_eq!(p[3].params[2].class(), Class::IntPtr);
        assert_eq!(p[4].params[1].class(), Class::Char);
        assert_eq!(p[4].params[2].class(), Class::Char);
        assert_eq!(p[4].params[2].decl(), "char ** array_of_argv[]");

        let mpich = "int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)\n    ;\nMPI_Aint MPI_Aint_add(MPI_Aint base, MPI_Aint disp) ;\nMPI_File PMPI_File_f2c(MPI_Fint) ;\nint MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]) ;";
        let p = prototypes(mpich);
        assert_eq!(p.len(), 4);
        assert_eq!(p[1].ret, "MPI_Aint");
        assert!(p[2].params[0].unnamed);
        assert_eq!(p[2].params[0].decl(), "MPI_Fint a0");
        assert_eq!(p[3].params[1].class(), Class::RequestPtr);
        assert!(!p[3].params[1].is_request_out());
        assert_eq!(p[3].params[2].class(), Class::StatusPtr);
    }
}
