! The Fortran module under MPI: sp_setup(comm=MPI_COMM_WORLD) with the integer handle of
! `use mpi`, regions on every rank, sp_finalize before MPI_Finalize. Rank r records
! "rank work" r+1 times, "common" 3 times and "halo/exchange" 10 times (by handle).
! Prints "DONE failures=N" on every rank. Usage: mpirun -np 2 mpi_usage <output file>
program mpi_usage
   use mpi
   use scope_profiler
   implicit none
   integer :: ierr, rank, nranks, i, h, failures, path_len
   character(len=:), allocatable :: path
   real(8) :: x, total

   failures = 0
   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
   call get_command_argument(1, length=path_len)
   allocate (character(len=path_len) :: path)
   call get_command_argument(1, path)

   call sp_setup(file_path=path, comm=MPI_COMM_WORLD, verbosity=0, ierr=ierr)
   call check(ierr == SP_OK, "setup")
   do i = 1, rank + 1
      call sp_region_start("rank work", ierr)
      call check(ierr == SP_OK, "start")
      x = sqrt(real(i, 8))
      call sp_region_stop("rank work", ierr)
      call check(ierr == SP_OK, "stop")
   end do
   do i = 1, 3
      call sp_region_start("common")
      call MPI_Allreduce(x, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
      call sp_region_stop("common")
   end do
   h = sp_region_register("halo/exchange", ierr)
   call check(ierr == SP_OK, "register")
   do i = 1, 10
      call sp_region_start_id(h)
      call sp_region_stop_id(h)
   end do
   call sp_finalize(ierr)
   call check(ierr == SP_OK, "finalize")
   call MPI_Finalize(ierr)
   print '(a,i0,a,i0)', "DONE failures=", failures, " rank=", rank

contains

   subroutine check(ok, what)
      logical, intent(in) :: ok
      character(len=*), intent(in) :: what
      if (.not. ok) then
         failures = failures + 1
         print '(a,i0,a,a,a,a)', "FAIL rank ", rank, ": ", what, ": ", sp_last_error()
      end if
   end subroutine check

end program mpi_usage
