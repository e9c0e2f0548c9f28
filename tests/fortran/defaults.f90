! sp_setup with no arguments (or, with the argument "blank", with a blank file_path, which
! counts as not given): file, verbosity and on/off come from the environment.
! Records "step" 4 times (by name and by handle); prints "DONE failures=N".
program defaults
   use scope_profiler
   implicit none
   integer :: ierr, i, h, failures
   character(len=16) :: arg, blank

   failures = 0
   call get_command_argument(1, arg)
   if (arg == "blank") then
      blank = ""
      call sp_setup(file_path=blank, ierr=ierr)
      if (ierr /= SP_OK) failures = failures + 1
   else
      call sp_setup()
   end if
   h = sp_region_register("step", ierr)
   if (ierr /= SP_OK) failures = failures + 1
   do i = 1, 2
      call sp_region_start("step", ierr)
      if (ierr /= SP_OK) failures = failures + 1
      call sp_region_stop("step", ierr)
      if (ierr /= SP_OK) failures = failures + 1
      call sp_region_start_id(h, ierr)
      if (ierr /= SP_OK) failures = failures + 1
      call sp_region_stop_id(h, ierr)
      if (ierr /= SP_OK) failures = failures + 1
   end do
   call sp_finalize(ierr)
   if (ierr /= SP_OK) failures = failures + 1
   print '(a,i0)', "DONE failures=", failures
end program defaults
