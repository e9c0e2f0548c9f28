! Fortran MPI consumer: sp_setup(comm=MPI_COMM_WORLD); rank r records "mpi fortran region" r+1 times.
program consumer_mpi
   use mpi
   use scope_profiler
   implicit none
   character(len=4096) :: path
   integer :: i, ierr, rank
   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   call get_command_argument(1, path)
   call sp_setup(file_path=path, comm=MPI_COMM_WORLD, verbosity=0, ierr=ierr)
   if (ierr /= SP_OK) error stop 1
   do i = 0, rank
      call sp_region_start("mpi fortran region")
      call sp_region_stop("mpi fortran region")
   end do
   call sp_finalize(ierr)
   if (ierr /= SP_OK) error stop 1
   call MPI_Finalize(ierr)
end program consumer_mpi
