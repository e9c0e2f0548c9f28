! Sampling from Fortran: sp_start_sampling, a region whose loop runs on one marked line,
! sp_stop_sampling, then a region that must get no sample (tests/sampling.rs).
program sampling
   use scope_profiler
   implicit none
   integer :: ierr
   character(len=512) :: file
   double precision :: x

   call get_command_argument(1, file)
   call sp_setup(file_path=trim(file), ierr=ierr)
   if (ierr /= SP_OK) error stop "sp_setup"
   call sp_start_sampling(20000, ierr)
   if (ierr /= SP_ERR_INVALID_ARGUMENT) error stop "a rate above 10000 is refused"
   call sp_start_sampling(1000, ierr)
   if (ierr /= SP_OK) error stop "sp_start_sampling"
   call sp_region_start("kernel")
   x = burn(1.0d0, 0.5d0)
   call sp_region_stop("kernel")
   call sp_stop_sampling(ierr)
   if (ierr /= SP_OK) error stop "sp_stop_sampling"
   call sp_region_start("unsampled")
   x = x + burn(x, 0.2d0)
   call sp_region_stop("unsampled")
   call sp_finalize(ierr)
   if (ierr /= SP_OK) error stop "sp_finalize"
   if (x > 0.0d0) print '(A)', "DONE"

contains

   !> `seconds` of CPU time in `spin`.
   function burn(x0, seconds) result(x)
      double precision, intent(in) :: x0, seconds
      double precision :: x, t0, t
      x = x0
      call cpu_time(t0)
      do
         x = spin(x, 100000)
         call cpu_time(t)
         if (t - t0 > seconds) exit
      end do
   end function burn

   function spin(x0, n) result(x)
      double precision, intent(in) :: x0
      integer, intent(in) :: n
      double precision :: x
      integer :: i
      x = x0
      do i = 1, n; x = x * 1.0000001d0 + 1.0d-9; x = x * 0.9999999d0; end do ! HOT:fortran
   end function spin
end program sampling
