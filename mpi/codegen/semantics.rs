//! What a wrapper records beyond the call's time, per routine: the bytes it moves, its peers,
//! the requests it creates, completes, starts or frees. Written once for every binding as C
//! templates over the routine's parameters by position (the MPI standard's order, the same in
//! C and Fortran), each checked against the header's prototype before use:
//!
//! - `$k` the value of parameter k (a count as int64_t, a datatype, communicator or window as
//!   a C handle: Fortran handles are converted);
//! - `&k` parameter k as a pointer (arrays, flags, statuses, buffers);
//! - `%k` 1 if parameter k is an array of MPI_Count (large-count routines), else 0;
//! - `$F` 1 in a Fortran wrapper, 0 in a C one.
//!
//! Rules that need no table: the first communicator passed by value (else the first window)
//! is the call's communicator (`sp_comm`/`sp_win`); a last parameter `MPI_Request *` is the
//! request the call creates (persistent for the `*_init` routines); freeing a communicator or
//! window drops the cached sizes and rank tables.

use super::parse::{Class, Proto};

/// The wrapper code of one routine.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sem {
    /// Before the PMPI call (saving request handles that the call frees).
    pub pre: &'static str,
    /// After a successful call.
    pub post: &'static str,
    /// `pre` fills an `sp_reqbuf rb` released after the call.
    pub reqbuf: bool,
    /// Parameter classes the templates expect: (position, class letter, see `matches`).
    pub expects: &'static str,
}

/// Does a parameter of class `c` fit the letter `l`?
/// n: count (int/MPI_Count), i: int, N: count array, t: datatype, T: datatype array,
/// b: buffer, s: status, r: request(s), f: int out (flag, index, outcount), w: window.
fn matches(l: char, c: Class) -> bool {
    match l {
        'n' => matches!(c, Class::Int | Class::Count),
        'i' => c == Class::Int,
        'N' => matches!(c, Class::IntPtr | Class::CountPtr),
        't' => c == Class::Type,
        'T' => c == Class::TypePtr,
        'b' => c == Class::Buf,
        's' => c == Class::StatusPtr,
        'r' => c == Class::RequestPtr,
        'f' => c == Class::IntPtr,
        'w' => c == Class::Win,
        _ => false,
    }
}

const fn sem(expects: &'static str, post: &'static str) -> Sem {
    Sem { pre: "", post, reqbuf: false, expects }
}

const fn reqs(expects: &'static str, pre: &'static str, post: &'static str) -> Sem {
    Sem { pre, post, reqbuf: true, expects }
}

/// The routine's name without `MPI_` and without the large-count `_c`.
pub fn base_name(name: &str) -> &str {
    let b = name.strip_prefix("MPI_").unwrap_or(name);
    b.strip_suffix("_c").unwrap_or(b)
}

/// The blocking collective whose parameters the nonblocking (`I...`) and persistent
/// (`..._init`) forms share in front: Iallreduce -> Allreduce, Bcast_init -> Bcast,
/// Ineighbor_alltoall -> Neighbor_alltoall.
fn blocking_form(base: &str) -> String {
    let b = base.strip_suffix("_init").unwrap_or(base);
    match b.strip_prefix('I') {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase()) => rest[..1].to_ascii_uppercase() + &rest[1..],
        _ => b.to_string(),
    }
}

fn table(base: &str) -> Option<Sem> {
    let blocking = blocking_form(base);
    let s = match base {
        "Send" | "Bsend" | "Ssend" | "Rsend" | "Isend" | "Ibsend" | "Issend" | "Irsend" | "Send_init" | "Bsend_init" | "Ssend_init" | "Rsend_init" => {
            sem("1n 2t 3i", "sp_send(&e, $1, $2, $3);")
        }
        "Psend_init" => sem("1i 2n 3t 4i", "sp_send(&e, $1 * $2, $3, $4);"),
        "Recv" => sem("1n 2t 3i 6s", "sp_recv(&e, $1, $2, $3, &6, $F);"),
        "Irecv" | "Recv_init" => sem("1n 2t 3i", "sp_recv(&e, $1, $2, $3, NULL, $F);"),
        "Precv_init" => sem("1i 2n 3t 4i", "sp_recv(&e, $1 * $2, $3, $4, NULL, $F);"),
        "Mrecv" => sem("1n 2t 4s", "sp_mrecv(&e, $1, $2, &4, $F);"),
        "Imrecv" => sem("1n 2t", "sp_mrecv(&e, $1, $2, NULL, $F);"),
        "Sendrecv" => sem("1n 2t 3i 6n 7t 8i 11s", "sp_send(&e, $1, $2, $3); sp_recv(&e, $6, $7, $8, &11, $F);"),
        "Isendrecv" => sem("1n 2t 3i 6n 7t 8i", "sp_send(&e, $1, $2, $3); sp_recv(&e, $6, $7, $8, NULL, $F);"),
        "Sendrecv_replace" => sem("1n 2t 3i 5i 8s", "sp_send(&e, $1, $2, $3); sp_recv(&e, $1, $2, $5, &8, $F);"),
        "Isendrecv_replace" => sem("1n 2t 3i 5i", "sp_send(&e, $1, $2, $3); sp_recv(&e, $1, $2, $5, NULL, $F);"),
        "Iprobe" | "Improbe" => sem("3f", "sp_poll(&e, &3);"),
        "Parrived" => sem("2f", "sp_poll(&e, &2);"),
        "Request_get_status" => sem("1f", "sp_poll(&e, &1);"),
        // Completion: the handles are saved before the call frees them.
        "Wait" => reqs("0r", "sp_req_save(&rb, 1, &0, $F);", "sp_done(&e, &rb);"),
        "Waitall" => reqs("0i 1r", "sp_req_save(&rb, $0, &1, $F);", "sp_done(&e, &rb);"),
        "Waitany" => reqs("0i 1r 2f", "sp_req_save(&rb, $0, &1, $F);", "sp_done_index(&e, &rb, &2, $F);"),
        "Waitsome" => reqs("0i 1r 2f 3f", "sp_req_save(&rb, $0, &1, $F);", "sp_done_some(&e, &rb, &2, &3, $F);"),
        "Test" => reqs("0r 1f", "sp_req_save(&rb, 1, &0, $F);", "sp_test(&e, &rb, &1);"),
        "Testall" => reqs("0i 1r 2f", "sp_req_save(&rb, $0, &1, $F);", "sp_test(&e, &rb, &2);"),
        "Testany" => reqs("0i 1r 2f 3f", "sp_req_save(&rb, $0, &1, $F);", "sp_test_any(&e, &rb, &2, &3, $F);"),
        "Testsome" => reqs("0i 1r 2f 3f", "sp_req_save(&rb, $0, &1, $F);", "sp_test_some(&e, &rb, &2, &3, $F);"),
        "Start" => reqs("0r", "sp_req_save(&rb, 1, &0, $F);", "sp_started(&e, &rb);"),
        "Startall" => reqs("0i 1r", "sp_req_save(&rb, $0, &1, $F);", "sp_started(&e, &rb);"),
        "Request_free" => reqs("0r", "sp_req_save(&rb, 1, &0, $F);", "sp_freed(&e, &rb);"),
        "Comm_free" | "Comm_disconnect" | "Win_free" => Sem { pre: "sp_comm_forget();", ..Default::default() },
        // One-sided (the window is the call's communicator).
        "Put" | "Rput" | "Accumulate" | "Raccumulate" => sem("1n 2t 3i", "sp_put(&e, $1, $2, $3);"),
        "Get" | "Rget" => sem("1n 2t 3i", "sp_get(&e, $1, $2, $3);"),
        "Get_accumulate" | "Rget_accumulate" => sem("1n 2t 4n 5t 6i", "sp_put(&e, $1, $2, $6); sp_get(&e, $4, $5, $6);"),
        "Fetch_and_op" => sem("2t 3i", "sp_put(&e, 1, $2, $3); sp_get(&e, 1, $2, $3);"),
        "Compare_and_swap" => sem("3t 4i", "sp_put(&e, 1, $3, $4); sp_get(&e, 1, $3, $4);"),
        _ => match blocking.as_str() {
            "Barrier" => sem("", "sp_coll(&e);"),
            "Bcast" => sem("1n 2t 3i", "sp_bcast(&e, $1, $2, $3);"),
            "Reduce" => sem("2n 3t 5i", "sp_reduce(&e, $2, $3, $5);"),
            "Allreduce" | "Scan" | "Exscan" => sem("2n 3t", "sp_allreduce(&e, $2, $3);"),
            "Reduce_scatter_block" => sem("2n 3t", "sp_reduce_scatter_block(&e, $2, $3);"),
            "Reduce_scatter" => sem("2N 3t", "sp_reduce_scatter(&e, &2, %2, $3);"),
            "Gather" => sem("0b 1n 2t 4n 5t 6i", "sp_gather(&e, &0, $1, $2, $4, $5, $6, $F);"),
            "Gatherv" => sem("0b 1n 2t 4N 6t 7i", "sp_gatherv(&e, &0, $1, $2, &4, %4, $6, $7, $F);"),
            "Scatter" => sem("1n 2t 3b 4n 5t 6i", "sp_scatter(&e, $1, $2, &3, $4, $5, $6, $F);"),
            "Scatterv" => sem("1N 3t 4b 5n 6t 7i", "sp_scatterv(&e, &1, %1, $3, &4, $5, $6, $7, $F);"),
            "Allgather" => sem("0b 1n 2t 4n 5t", "sp_allgather(&e, &0, $1, $2, $4, $5, $F);"),
            "Allgatherv" => sem("0b 1n 2t 4N 6t", "sp_allgatherv(&e, &0, $1, $2, &4, %4, $6, $F);"),
            "Alltoall" => sem("0b 1n 2t 4n 5t", "sp_alltoall(&e, &0, $1, $2, $4, $5, $F);"),
            "Alltoallv" => sem("0b 1N 3t 5N 7t", "sp_alltoallv(&e, &0, &1, %1, $3, &5, $7, $F);"),
            "Alltoallw" => sem("0b 1N 3T 5N 7T", "sp_alltoallw(&e, &0, &1, %1, &3, &5, &7, $F);"),
            "Neighbor_allgather" | "Neighbor_alltoall" => sem("1n 2t 4n 5t", "sp_neighbor(&e, $1, NULL, $2, $4, NULL, 0, $5);"),
            "Neighbor_allgatherv" => sem("1n 2t 4N 6t", "sp_neighbor(&e, $1, NULL, $2, 0, &4, %4, $6);"),
            "Neighbor_alltoallv" => sem("1N 3t 5N 7t", "sp_neighbor(&e, 0, &1, $3, 0, &5, %1, $7);"),
            "Neighbor_alltoallw" => sem("", "sp_coll(&e);"),
            _ => return None,
        },
    };
    Some(s)
}

/// MPI-IO data access: `File_[i]{read,write}[_at][_all|_shared|_ordered][_begin]`.
fn file_io(base: &str) -> Option<Sem> {
    let rest = base.strip_prefix("File_")?;
    let rest = rest.strip_prefix('i').unwrap_or(rest);
    let (write, rest) = if let Some(r) = rest.strip_prefix("write") {
        (true, r)
    } else {
        (false, rest.strip_prefix("read")?)
    };
    let (at, rest) = match rest.strip_prefix("_at") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = rest.strip_suffix("_begin").unwrap_or(rest);
    if !matches!(rest, "" | "_all" | "_shared" | "_ordered") {
        return None;
    }
    Some(match (at, write) {
        (true, true) => sem("3n 4t", "sp_io(&e, $3, $4, 1);"),
        (true, false) => sem("3n 4t", "sp_io(&e, $3, $4, 0);"),
        (false, true) => sem("2n 3t", "sp_io(&e, $2, $3, 1);"),
        (false, false) => sem("2n 3t", "sp_io(&e, $2, $3, 0);"),
    })
}

/// The semantics of `p`, checked against its parameters; Err names a mismatch (the routine
/// is then timed only).
pub fn of(p: &Proto) -> Result<Option<Sem>, String> {
    let base = base_name(&p.name);
    let Some(s) = table(base).or_else(|| file_io(base)) else { return Ok(None) };
    for want in s.expects.split_whitespace() {
        let (pos, letter) = want.split_at(want.len() - 1);
        let pos: usize = pos.parse().map_err(|_| format!("bad expectation {want}"))?;
        let l = letter.chars().next().unwrap();
        match p.params.get(pos) {
            Some(param) if matches(l, param.class()) => {}
            Some(param) => return Err(format!("{}: parameter {pos} ({}) is not what the traffic code expects ({l})", p.name, param.decl())),
            None => return Err(format!("{}: has no parameter {pos}", p.name)),
        }
    }
    Ok(Some(s))
}

/// Routines whose completion calls are not request origins even though they take a request.
pub fn is_completion(base: &str) -> bool {
    matches!(
        base,
        "Wait" | "Waitall" | "Waitany" | "Waitsome" | "Test" | "Testall" | "Testany" | "Testsome" | "Start" | "Startall" | "Request_free" | "Request_get_status" | "Cancel" | "Test_cancelled" | "Grequest_complete" | "Pready" | "Pready_range" | "Pready_list" | "Parrived"
    )
}

#[cfg(test)]
mod tests {
    use super::super::parse::prototypes;
    use super::*;

    #[test]
    fn templates_fit_the_standard_prototypes() {
        let h = "int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Gatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status);
int MPI_File_read_ordered_end(MPI_File fh, void *buf, MPI_Status *status);
int MPI_Ineighbor_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Barrier_init(MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Send(const void *buf, MPI_Datatype count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);";
        let p = prototypes(h);
        assert_eq!(of(&p[0]).unwrap().unwrap().post, "sp_allreduce(&e, $2, $3);");
        assert_eq!(of(&p[1]).unwrap().unwrap().post, "sp_gatherv(&e, &0, $1, $2, &4, %4, $6, $7, $F);");
        assert_eq!(of(&p[2]).unwrap().unwrap().post, "sp_io(&e, $3, $4, 1);");
        assert_eq!(of(&p[3]).unwrap(), None);
        assert_eq!(of(&p[4]).unwrap().unwrap().post, "sp_neighbor(&e, 0, &1, $3, 0, &5, %1, $7);");
        assert_eq!(of(&p[5]).unwrap().unwrap().post, "sp_coll(&e);");
        // A prototype that does not fit is refused, not guessed at.
        assert!(of(&p[6]).is_err());
        assert_eq!(base_name("MPI_Send_c"), "Send");
        assert!(is_completion("Waitall") && !is_completion("Isend"));
    }
}
