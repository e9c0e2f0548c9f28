! Records "work" (by name) and "step" (by handle) until it is killed. Arguments: the profile and
! a side file; after every batch the number of completed calls is written to the side file and
! flushed, so a test knows what was complete before its signal.
program kill_loop
   use scope_profiler
   implicit none
   integer :: ierr, i, h, side
   integer(kind=8) :: n
   character(len=512) :: out_file, side_file

   call get_command_argument(1, out_file)
   call get_command_argument(2, side_file)
   call sp_setup(file_path=trim(out_file), verbosity=0, ierr=ierr)
   if (ierr /= SP_OK) error stop 3
   h = sp_region_register("step", ierr)
   open(newunit=side, file=trim(side_file), action="write", status="replace")
   n = 0
   do
      do i = 1, 2000
         call sp_region_start("work", ierr)
         call sp_region_stop("work", ierr)
         call sp_region_start_id(h, ierr)
         call sp_region_stop_id(h, ierr)
      end do
      n = n + 2000
      write(side, '(a,i0)') "work ", n
      flush(side)
   end do
end program kill_loop
