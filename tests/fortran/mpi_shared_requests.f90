! Fortran (use mpi) requests that share one handle value: nonblocking calls that complete at
! once (to self, to the other rank, to MPI_PROC_NULL) get the same handle from Open MPI and
! MPICH. Completed by one MPI_Waitall, and by MPI_Waitany after copying each handle from a
! temporary (each send's message received before). 2 ranks; writes what each rank did to expect.<rank> (as tests/c/mpi_calls.c).
program mpi_shared_requests
  use mpi
  implicit none
  integer, parameter :: n = 500, k = 20
  integer :: ierr, rank, size, other, i, idx, tmp
  integer :: req(4 * n), q(2 * k), sb(n), rb(2 * n), big(k), bigin(k)
  character(len=32) :: fname
  integer :: out

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  if (size /= 2) call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  other = 1 - rank
  write (fname, '(A,I0)') 'expect.', rank
  open (newunit=out, file=trim(fname), status='replace', action='write')
  sb = 0
  do i = 1, n
    call MPI_Isend(sb(i), 1, MPI_INTEGER, rank, 100, MPI_COMM_WORLD, req(i), ierr)
    call MPI_Isend(sb(i), 1, MPI_INTEGER, other, 101, MPI_COMM_WORLD, req(n + i), ierr)
  end do
  do i = 1, n
    call MPI_Irecv(rb(i), 1, MPI_INTEGER, rank, 100, MPI_COMM_WORLD, req(2 * n + i), ierr)
    call MPI_Irecv(rb(n + i), 1, MPI_INTEGER, other, 101, MPI_COMM_WORLD, req(3 * n + i), ierr)
  end do
  call MPI_Waitall(4 * n, req, MPI_STATUSES_IGNORE, ierr)
  ! Through a temporary: k sends to MPI_PROC_NULL (3 integers: no bytes) and k of i integers
  ! to self, received in reverse order, completed one at a time by MPI_Waitany.
  big = 0
  do i = 1, k
    call MPI_Isend(big, 3, MPI_INTEGER, MPI_PROC_NULL, 1, MPI_COMM_WORLD, tmp, ierr)
    q(i) = tmp
  end do
  do i = 1, k
    call MPI_Isend(big, i, MPI_INTEGER, rank, 200 + i, MPI_COMM_WORLD, tmp, ierr)
    call MPI_Recv(bigin, i, MPI_INTEGER, rank, 200 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    q(k + i) = tmp
  end do
  do i = 1, 2 * k
    call MPI_Waitany(2 * k, q, idx, MPI_STATUS_IGNORE, ierr)
  end do
  call expect('MPI_Isend', int(2 * n + 2 * k, 8), int(8 * n + 4 * (k * (k + 1)) / 2, 8), 0_8)
  call expect('MPI_Irecv', int(2 * n, 8), 0_8, int(8 * n, 8))
  call expect('MPI_Recv', int(k, 8), 0_8, int(4 * (k * (k + 1)) / 2, 8))
  call expect('MPI_Waitall', 1_8, 0_8, 0_8)
  call expect('MPI_Waitany', int(2 * k, 8), 0_8, 0_8)
  call complete('MPI_Waitall', 'MPI_Isend', int(2 * n, 8), int(8 * n, 8))
  call complete('MPI_Waitall', 'MPI_Irecv', int(2 * n, 8), int(8 * n, 8))
  call complete('MPI_Waitany', 'MPI_Isend', int(2 * k, 8), int(4 * (k * (k + 1)) / 2, 8))
  write (out, '(A,I0,A,I0,A,I0,A,I0)') 'PEER'//achar(9), rank, achar(9), rank, achar(9), &
    4 * n + 4 * (k * (k + 1)) / 2, achar(9), 4 * n + 4 * (k * (k + 1)) / 2
  write (out, '(A,I0,A,I0,A,I0,A,I0)') 'PEER'//achar(9), rank, achar(9), other, achar(9), 4 * n, achar(9), 4 * n
  close (out)
  call MPI_Finalize(ierr)

contains

  include 'expect_lines.inc'
end program
