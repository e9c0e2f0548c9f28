! Cost of the Fortran module's region calls when profiling is off, against an empty loop in the
! same process. Run with SCOPE_PROFILER_DISABLE=1 against the real module (off at run time), or
! built against fortran/scope_profiler_disabled.f90 (off at compile time: no library at all).
!
!   empty loop   the loop alone (a volatile update per iteration, as every form below has)
!   handle pair  call sp_region_start_id(h); call sp_region_stop_id(h)
!   name pair    call sp_region_start("..."); call sp_region_stop("...")
!
! Rounds alternate between the forms; the time per pair is the median over rounds.
! Usage: disabled_overhead_f [pairs_per_round=2000000] [rounds=15]
program disabled_overhead_f
   use, intrinsic :: iso_fortran_env, only: int64, real64
   use scope_profiler
   implicit none
   integer, parameter :: forms = 3
   character(len=12), parameter :: keys(forms) = [character(len=12) :: "empty_loop", "handle_pair", "name_pair"]
   integer(int64), volatile :: sink
   integer(int64) :: n, i, t0, t1, rate
   integer :: rounds, r, f, h, ierr
   real(real64) :: ns(forms, 64), med(forms), least(forms)
   character(len=32) :: arg

   n = 2000000
   rounds = 15
   if (command_argument_count() >= 1) then
      call get_command_argument(1, arg)
      read (arg, *) n
   end if
   if (command_argument_count() >= 2) then
      call get_command_argument(2, arg)
      read (arg, *) rounds
   end if
   rounds = max(1, min(rounds, 64))
   call sp_setup(file_path="/tmp/sp_bench_disabled_f.h5", verbosity=0, ierr=ierr)
   if (ierr /= SP_OK) stop 1
   h = sp_region_register("bench_handle")
   sink = 0
   call system_clock(count_rate=rate)
   do r = 1, rounds
      do f = 1, forms
         call system_clock(t0)
         select case (f)
         case (1)
            do i = 1, n
               sink = sink + 1
            end do
         case (2)
            do i = 1, n
               call sp_region_start_id(h)
               call sp_region_stop_id(h)
               sink = sink + 1
            end do
         case (3)
            do i = 1, n
               call sp_region_start("bench_name")
               call sp_region_stop("bench_name")
               sink = sink + 1
            end do
         end select
         call system_clock(t1)
         ns(f, r) = real(t1 - t0, real64) / real(rate, real64) * 1.0e9_real64 / real(n, real64)
      end do
   end do
   do f = 1, forms
      call sort(ns(f, 1:rounds))
      least(f) = ns(f, 1)
      if (mod(rounds, 2) == 1) then
         med(f) = ns(f, rounds / 2 + 1)
      else
         med(f) = 0.5_real64 * (ns(f, rounds / 2) + ns(f, rounds / 2 + 1))
      end if
   end do
   write (*, '(a, i0, a, i0, a, l1)') "Fortran: ", rounds, " rounds of ", n, " pairs; module enabled: ", SP_ENABLED
   do f = 1, forms
      write (*, '(a12, f9.2, a, f7.2, a, sp, f7.2, a, f7.2, a)') keys(f), med(f), " ns (", least(f), &
         ")   over the empty loop: ", med(f) - med(1), " ns (", least(f) - least(1), ")"
   end do
   do f = 1, forms
      write (*, '(a, a, 1x, f0.3)') "RESULT f_", trim(keys(f)), med(f)
      write (*, '(a, a, 1x, f0.3)') "RESULT min_f_", trim(keys(f)), least(f)
   end do
   call sp_finalize()

contains

   subroutine sort(v)
      real(real64), intent(inout) :: v(:)
      integer :: a, b
      real(real64) :: x
      do a = 2, size(v)
         x = v(a)
         b = a - 1
         do while (b >= 1)
            if (v(b) <= x) exit
            v(b + 1) = v(b)
            b = b - 1
         end do
         v(b + 1) = x
      end do
   end subroutine sort
end program disabled_overhead_f
