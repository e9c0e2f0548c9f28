! perf events and annotations from Fortran: sp_setup(perf_events=..., perf_regions=...) (only
! "axpy" counts; "setup" is timed only), sp_region_add_flops and sp_region_add_bytes with and
! without ierr. Prints "DONE failures=N".
! Usage: perf_usage <output file>
program perf_usage
   use scope_profiler
   implicit none
   integer :: failures, ierr, h, i, path_len
   character(len=:), allocatable :: path
   double precision :: x

   failures = 0
   call get_command_argument(1, length=path_len)
   allocate (character(len=path_len) :: path)
   call get_command_argument(1, path)
   call sp_setup(file_path=path, verbosity=0, ierr=ierr, perf_events="task-clock,page-faults", perf_regions="ax*")
   if (ierr /= SP_OK) failures = failures + 1
   call sp_region_start("setup")
   call sp_region_stop("setup")

   h = sp_region_register("axpy")
   x = 0.0d0
   do i = 1, 4
      call sp_region_start_id(h)
      call work(x)
      call sp_region_stop_id(h)
      call sp_region_add_flops(h, 2.0d6, ierr)
      if (ierr /= SP_OK) failures = failures + 1
   end do
   call sp_region_add_bytes(h, 2.4d7)
   call sp_region_add_flops(-5, 1.0d0, ierr)
   if (ierr /= SP_ERR_INVALID_HANDLE) failures = failures + 1

   call sp_finalize(ierr)
   if (ierr /= SP_OK) failures = failures + 1
   if (x < 0.0d0) print *, x
   print '(a,i0)', "DONE failures=", failures

contains

   subroutine work(acc)
      double precision, intent(inout) :: acc
      integer :: k
      do k = 1, 1000000
         acc = acc + 0.5d0 * k
      end do
   end subroutine work
end program perf_usage
