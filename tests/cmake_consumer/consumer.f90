! Fortran consumer: sp_setup(file_path=<argument 1>), "fortran region" 5 times.
program consumer
   use scope_profiler
   implicit none
   character(len=4096) :: path
   integer :: i, ierr
   call get_command_argument(1, path)
   call sp_setup(file_path=path, verbosity=0, ierr=ierr)
   if (ierr /= SP_OK) error stop 1
   do i = 1, 5
      call sp_region_start("fortran region")
      call sp_region_stop("fortran region")
   end do
   call sp_finalize(ierr)
   if (ierr /= SP_OK) error stop 1
end program consumer
