!> scope_profiler_disabled: the scope_profiler module with profiling compiled out.
!>
!> The same module name, the same public names and the same interfaces as scope_profiler.f90,
!> but every routine does nothing and returns what a run with SCOPE_PROFILER_DISABLE=1 returns
!> (ierr = SP_OK, handle 0, statistics of zeros, sp_last_error() = ""). It calls no C and needs
!> no library: compile this file instead of scope_profiler.f90 (or link CMake's
!> ScopeProfiler::fortran_disabled) and the annotated program builds without scope_profiler.
!> A call of an empty module procedure is a call and a return; with link-time optimization
!> (-flto) the compiler removes the calls too. Code that exists only for profiling can be
!> guarded with `if (SP_ENABLED)`, which is .false. here, so the compiler drops it.
!>
!> tests/disabled_build.rs checks that every program of the Fortran tests compiles against
!> both modules, and that one runs without the library.
module scope_profiler
   use, intrinsic :: iso_c_binding, only: c_size_t, c_int64_t
   implicit none
   private

   public :: sp_setup, sp_finalize
   public :: sp_region_start, sp_region_stop
   public :: sp_region_register, sp_region_start_id, sp_region_stop_id
   public :: sp_last_error, sp_status_string, sp_version
   public :: sp_region_add_flops, sp_region_add_bytes
   public :: sp_stats_t, sp_region_get_stats, sp_print_summary
   public :: sp_start_sampling, sp_stop_sampling
   public :: sp_set_metadata

   !> .false.: profiling is compiled out (.true. in scope_profiler.f90).
   logical, parameter, public :: SP_ENABLED = .false.

   !> Status codes (values of include/scope_profiler.h).
   integer, parameter, public :: SP_OK = 0
   integer, parameter, public :: SP_ALREADY_SET_UP = 1
   integer, parameter, public :: SP_ALREADY_FINALIZED = 2
   integer, parameter, public :: SP_ERR_NOT_INITIALIZED = -1
   integer, parameter, public :: SP_ERR_FINALIZED = -2
   integer, parameter, public :: SP_ERR_NULL_ARGUMENT = -3
   integer, parameter, public :: SP_ERR_INVALID_ARGUMENT = -4
   integer, parameter, public :: SP_ERR_EMPTY_NAME = -5
   integer, parameter, public :: SP_ERR_NAME_TOO_LONG = -6
   integer, parameter, public :: SP_ERR_INVALID_UTF8 = -7
   integer, parameter, public :: SP_ERR_INVALID_HANDLE = -8
   integer, parameter, public :: SP_ERR_TOO_MANY_REGIONS = -9
   integer, parameter, public :: SP_ERR_NESTING_TOO_DEEP = -10
   integer, parameter, public :: SP_ERR_UNMATCHED_STOP = -11
   integer, parameter, public :: SP_ERR_NOT_INNERMOST = -12
   integer, parameter, public :: SP_ERR_WRITE_FAILED = -13
   integer, parameter, public :: SP_ERR_MPI = -14
   integer, parameter, public :: SP_ERR_UNSUPPORTED = -15
   integer, parameter, public :: SP_ERR_REENTRANT = -16
   integer, parameter, public :: SP_ERR_INTERNAL = -99
   !> Limits.
   integer, parameter, public :: SP_MAX_NAME_LEN = 1024
   integer, parameter, public :: SP_MAX_DEPTH = 4096
   integer, parameter, public :: SP_MAX_REGIONS = 1048576

   !> struct sp_stats of the C header: a region's completed calls so far (sp_region_get_stats).
   type, bind(C) :: sp_stats_t
      integer(c_size_t) :: struct_size = 0
      integer(c_int64_t) :: count = 0
      integer(c_int64_t) :: total_ns = 0
      integer(c_int64_t) :: min_ns = 0
      integer(c_int64_t) :: max_ns = 0
      integer(c_int64_t) :: exclusive_ns = 0
   end type sp_stats_t

contains

   !> Does nothing (see scope_profiler.f90 for the arguments).
   subroutine sp_setup(file_path, use_likwid, comm, verbosity, ierr, layout, clock, perf_events, perf_regions)
      character(len=*), intent(in), optional :: file_path
      logical, intent(in), optional :: use_likwid
      integer, intent(in), optional :: comm
      integer, intent(in), optional :: verbosity
      integer, intent(out), optional :: ierr
      character(len=*), intent(in), optional :: layout
      character(len=*), intent(in), optional :: clock
      character(len=*), intent(in), optional :: perf_events
      character(len=*), intent(in), optional :: perf_regions
      call unused_c(file_path)
      call unused_l(use_likwid)
      call unused_i(comm)
      call unused_i(verbosity)
      call unused_c(layout)
      call unused_c(clock)
      call unused_c(perf_events)
      call unused_c(perf_regions)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_setup

   !> Statistics of zeros.
   subroutine sp_region_get_stats(handle, stats, ierr)
      integer, intent(in) :: handle
      type(sp_stats_t), intent(out) :: stats
      integer, intent(out), optional :: ierr
      call unused_i(handle)
      stats%struct_size = int(storage_size(stats) / 8, c_size_t)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_get_stats

   subroutine sp_set_metadata(key, value, ierr)
      character(len=*), intent(in) :: key
      character(len=*), intent(in) :: value
      integer, intent(out), optional :: ierr
      call unused_c(key)
      call unused_c(value)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_set_metadata

   subroutine sp_print_summary(ierr)
      integer, intent(out), optional :: ierr
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_print_summary

   subroutine sp_finalize(ierr)
      integer, intent(out), optional :: ierr
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_finalize

   subroutine sp_start_sampling(hz, ierr)
      integer, intent(in) :: hz
      integer, intent(out), optional :: ierr
      call unused_i(hz)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_start_sampling

   subroutine sp_stop_sampling(ierr)
      integer, intent(out), optional :: ierr
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_stop_sampling

   subroutine sp_region_start(name, ierr)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      call unused_c(name)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_start

   subroutine sp_region_stop(name, ierr)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      call unused_c(name)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_stop

   !> Handle 0, as a run with SCOPE_PROFILER_DISABLE=1 returns.
   function sp_region_register(name, ierr, file, line) result(handle)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      character(len=*), intent(in), optional :: file
      integer, intent(in), optional :: line
      integer :: handle
      call unused_c(name)
      call unused_c(file)
      call unused_i(line)
      handle = 0
      if (present(ierr)) ierr = SP_OK
   end function sp_region_register

   subroutine sp_region_start_id(handle, ierr)
      integer, intent(in) :: handle
      integer, intent(out), optional :: ierr
      call unused_i(handle)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_start_id

   subroutine sp_region_stop_id(handle, ierr)
      integer, intent(in) :: handle
      integer, intent(out), optional :: ierr
      call unused_i(handle)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_stop_id

   subroutine sp_region_add_flops(handle, flops, ierr)
      integer, intent(in) :: handle
      double precision, intent(in) :: flops
      integer, intent(out), optional :: ierr
      call unused_i(handle)
      call unused_d(flops)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_add_flops

   subroutine sp_region_add_bytes(handle, bytes, ierr)
      integer, intent(in) :: handle
      double precision, intent(in) :: bytes
      integer, intent(out), optional :: ierr
      call unused_i(handle)
      call unused_d(bytes)
      if (present(ierr)) ierr = SP_OK
   end subroutine sp_region_add_bytes

   !> "": no call ever fails.
   function sp_last_error() result(message)
      character(len=:), allocatable :: message
      message = ""
   end function sp_last_error

   function sp_status_string(status) result(message)
      integer, intent(in) :: status
      character(len=:), allocatable :: message
      call unused_i(status)
      message = "scope_profiler is compiled out (scope_profiler_disabled.f90)"
   end function sp_status_string

   function sp_version() result(version)
      character(len=:), allocatable :: version
      version = "disabled"
   end function sp_version

   ! ---------------------------------------------------------------------------------
   ! Helpers (private): they mark an argument as used, so that the module compiles without
   ! warnings under -Wall -Wextra; each is a compare the compiler folds away.

   pure subroutine unused_c(s)
      character(len=*), intent(in), optional :: s
      if (present(s)) then
         if (len(s) < 0) return
      end if
   end subroutine unused_c

   pure subroutine unused_i(i)
      integer, intent(in), optional :: i
      if (present(i)) then
         if (i == 0) return
      end if
   end subroutine unused_i

   pure subroutine unused_l(l)
      logical, intent(in), optional :: l
      if (present(l)) then
         if (l) return
      end if
   end subroutine unused_l

   pure subroutine unused_d(d)
      double precision, intent(in), optional :: d
      if (present(d)) then
         if (d > 0) return
      end if
   end subroutine unused_d

end module scope_profiler
