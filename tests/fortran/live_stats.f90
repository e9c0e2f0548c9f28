! The layout option and the live statistics from Fortran: sp_setup(layout=...), a region
! recorded in a loop, sp_region_get_stats while profiling and after sp_finalize, and
! sp_print_summary mid-run. Prints "EXPECT<TAB>calls<TAB>name", "STATS ..." and "DONE failures=N".
! Usage: live_stats <output file> <layout>
program live_stats
   use scope_profiler
   implicit none
   integer :: failures, ierr, h, i, n
   type(sp_stats_t) :: s
   character(len=256) :: path, layout

   failures = 0
   call get_command_argument(1, path)
   call get_command_argument(2, layout)
   call sp_setup(file_path=path, verbosity=0, ierr=ierr, layout=layout)
   call check(ierr == SP_OK, "setup")
   h = sp_region_register("fortran loop")
   n = 250
   do i = 1, n
      call sp_region_start_id(h)
      call sp_region_stop_id(h)
   end do
   call sp_region_get_stats(h, s, ierr)
   call check(ierr == SP_OK, "get_stats")
   call check(s%count == n, "count")
   call check(s%min_ns <= s%max_ns .and. s%total_ns >= s%max_ns, "min <= max <= total")
   call check(s%exclusive_ns == s%total_ns, "no children: all exclusive")
   write (*, '(a,i0,a,i0,a,i0,a,i0)') "STATS ", s%count, " ", s%total_ns, " ", s%min_ns, " ", s%max_ns
   call sp_region_get_stats(-5, s, ierr)
   call check(ierr == SP_ERR_INVALID_HANDLE, "bad handle")
   write (*, '(a)') "--- live summary ---"
   call sp_print_summary(ierr)
   call check(ierr == SP_OK, "print_summary")
   write (*, '(a,a,i0,a,a)') "EXPECT", achar(9), n, achar(9), "fortran loop"
   call sp_finalize(ierr)
   call check(ierr == SP_OK, "finalize")
   call sp_region_get_stats(h, s, ierr)
   call check(ierr == SP_OK .and. s%count == n, "stats after finalize")
   write (*, '(a,i0)') "DONE failures=", failures

contains

   subroutine check(ok, what)
      logical, intent(in) :: ok
      character(len=*), intent(in) :: what
      if (.not. ok) then
         failures = failures + 1
         write (*, '(a,a)') "FAIL ", what
      end if
   end subroutine check
end program live_stats
