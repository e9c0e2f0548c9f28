! A Fortran MPI program (use mpi) that never calls sp_*: its MPI calls are recorded by the MPI
! plugin alone. Writes what each rank did to expect.<rank>, like tests/c/mpi_calls.c:
!   EXPECT <rank> <routine> <calls> <bytes sent> <bytes received> <empty polls>
!   COMPLETE <rank> <completing routine> <origin routine> <requests> <bytes>
program mpi_calls_f
  use mpi
  implicit none
  integer :: ierr, rank, size, right, left, i, provided
  integer :: buf(100), inb(100), req(2), st(MPI_STATUS_SIZE)
  integer :: ibuf(64), namelen
  double precision :: x, y
  character(len=MPI_MAX_OBJECT_NAME) :: cname
  character(len=MPI_MAX_PROCESSOR_NAME) :: pname
  logical :: flag
  character(len=32) :: fname
  integer :: out

  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  write (fname, '(A,I0)') 'expect.', rank
  open (newunit=out, file=trim(fname), status='replace', action='write')
  right = mod(rank + 1, size)
  left = mod(rank + size - 1, size)
  buf = 0
  do i = 1, 3
    if (mod(rank, 2) == 0) then
      call MPI_Send(buf, 100, MPI_INTEGER, right, 1, MPI_COMM_WORLD, ierr)
      call MPI_Recv(inb, 100, MPI_INTEGER, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    else
      call MPI_Recv(inb, 100, MPI_INTEGER, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, st, ierr)
      call MPI_Send(buf, 100, MPI_INTEGER, right, 1, MPI_COMM_WORLD, ierr)
    end if
  end do
  call expect('MPI_Send', 3_8, 1200_8, 0_8)
  call expect('MPI_Recv', 3_8, 0_8, 1200_8)
  x = rank
  do i = 1, 5
    call MPI_Allreduce(x, y, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  call expect('MPI_Allreduce', 5_8, 40_8, 40_8)
  ibuf = 0
  call MPI_Bcast(ibuf, 64, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    call expect('MPI_Bcast', 1_8, 256_8, 0_8)
  else
    call expect('MPI_Bcast', 1_8, 0_8, 256_8)
  end if
  do i = 1, 3
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end do
  call expect('MPI_Barrier', 3_8, 0_8, 0_8)
  call MPI_Irecv(inb, 10, MPI_INTEGER, left, 4, MPI_COMM_WORLD, req(1), ierr)
  call MPI_Isend(buf, 10, MPI_INTEGER, right, 4, MPI_COMM_WORLD, req(2), ierr)
  call MPI_Waitall(2, req, MPI_STATUSES_IGNORE, ierr)
  call expect('MPI_Irecv', 1_8, 0_8, 40_8)
  call expect('MPI_Isend', 1_8, 40_8, 0_8)
  call expect('MPI_Waitall', 1_8, 0_8, 0_8)
  call complete('MPI_Waitall', 'MPI_Irecv', 1_8, 40_8)
  call complete('MPI_Waitall', 'MPI_Isend', 1_8, 40_8)
  ! In place: the sum goes into x itself.
  call MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call expect('MPI_Allreduce', 6_8, 48_8, 48_8)
  ! A nonblocking receive completed by MPI_Test (polls that find nothing are not counted
  ! here: the message is there after the barrier).
  call MPI_Irecv(inb, 2, MPI_INTEGER, left, 6, MPI_COMM_WORLD, req(1), ierr)
  call MPI_Send(buf, 2, MPI_INTEGER, right, 6, MPI_COMM_WORLD, ierr)
  call MPI_Wait(req(1), MPI_STATUS_IGNORE, ierr)
  call expect('MPI_Send', 4_8, 1208_8, 0_8)
  call expect('MPI_Irecv', 2_8, 0_8, 48_8)
  call complete('MPI_Wait', 'MPI_Irecv', 1_8, 8_8)
  ! Character arguments (hidden lengths) pass through the wrappers intact.
  call MPI_Comm_set_name(MPI_COMM_WORLD, 'the world', ierr)
  call MPI_Comm_get_name(MPI_COMM_WORLD, cname, namelen, ierr)
  call MPI_Get_processor_name(pname, namelen, ierr)
  if (trim(cname) /= 'the world' .or. namelen <= 0) then
    write (out, '(A,A,A)') 'FAIL name "', trim(cname), '"'
  end if
  call MPI_Initialized(flag, ierr)
  call expect('MPI_Comm_set_name', 1_8, 0_8, 0_8)
  call expect('MPI_Comm_get_name', 1_8, 0_8, 0_8)
  call expect('MPI_Get_processor_name', 1_8, 0_8, 0_8)
  call expect('MPI_Initialized', 1_8, 0_8, 0_8)
  call expect('MPI_Comm_rank', 1_8, 0_8, 0_8)
  call expect('MPI_Comm_size', 1_8, 0_8, 0_8)
  close (out)
  call MPI_Finalize(ierr)

contains

  include 'expect_lines.inc'
end program
