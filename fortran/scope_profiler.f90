!> scope_profiler: Fortran bindings of the scope_profiler C ABI (include/scope_profiler.h).
!>
!> Standard Fortran 2008 with iso_c_binding. Compile this file with the same compiler as
!> your program (.mod files are compiler specific), or use the CMake target
!> ScopeProfiler::fortran, and link libscope_profiler.
!>
!>     use scope_profiler
!>     integer :: ierr, h
!>     call sp_setup(file_path="run.h5", comm=MPI_COMM_WORLD, ierr=ierr)
!>     call sp_region_start("solve")
!>     ...
!>     call sp_region_stop("solve")
!>     h = sp_region_register("kernel")       ! hot loops: no string work per call
!>     h = sp_region_register("kernel", file=__FILE__, line=__LINE__)  ! .F90: with its location
!>     call sp_region_start_id(h)
!>     call sp_region_stop_id(h)
!>     call sp_finalize()
!>
!> Every routine takes an optional `ierr` (as the MPI and HDF5 Fortran APIs do) that
!> receives the status: SP_OK (0) on success, > 0 a harmless notice, < 0 an error
!> (sp_last_error() explains it). When `ierr` is absent, a failing call never stops the
!> program: the library has already printed a warning on stderr, and a profiler must
!> never kill a job. Region names are passed as pointer plus length, without a NUL-terminated
!> copy; trailing blanks are not part of a name (the library ignores them).
module scope_profiler
   use, intrinsic :: iso_c_binding, only: c_char, c_int, c_int32_t, c_size_t, c_ptr, &
      c_null_char, c_loc, c_f_pointer, c_associated, c_double, c_int64_t
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

   !> .true. here; .false. in scope_profiler_disabled.f90, the same module with every call a
   !> no-op (profiling compiled out). `if (SP_ENABLED) ...` is removed by the compiler there.
   logical, parameter, public :: SP_ENABLED = .true.

   !> 1 when sp_setup found profiling switched off (SCOPE_PROFILER_DISABLE=1): the region calls
   !> then return at once, without calling the library. Written by sp_setup only.
   integer(c_int), save :: switched_off = 0

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

   !> struct sp_options of the C header, field by field.
   type, bind(C) :: sp_options_t
      integer(c_size_t) :: struct_size
      type(c_ptr) :: file_path
      integer(c_int32_t) :: use_likwid
      integer(c_int32_t) :: verbosity
      type(c_ptr) :: language
      integer(c_int32_t) :: comm
      integer(c_int32_t) :: has_comm
      type(c_ptr) :: layout
      type(c_ptr) :: clock
      type(c_ptr) :: perf_events
      type(c_ptr) :: perf_regions
   end type sp_options_t

   !> struct sp_stats of the C header: a region's completed calls so far (sp_region_get_stats).
   type, bind(C) :: sp_stats_t
      integer(c_size_t) :: struct_size = 0
      integer(c_int64_t) :: count = 0
      integer(c_int64_t) :: total_ns = 0
      integer(c_int64_t) :: min_ns = 0
      integer(c_int64_t) :: max_ns = 0
      integer(c_int64_t) :: exclusive_ns = 0
   end type sp_stats_t

   interface
      function c_sp_options_init(options) bind(C, name="sp_options_init") result(rc)
         import :: c_int, sp_options_t
         type(sp_options_t), intent(out) :: options
         integer(c_int) :: rc
      end function c_sp_options_init

      function c_sp_setup(options) bind(C, name="sp_setup") result(rc)
         import :: c_int, sp_options_t
         type(sp_options_t), intent(in) :: options
         integer(c_int) :: rc
      end function c_sp_setup

      function c_sp_region_register_n(name, len) bind(C, name="sp_region_register_n") result(handle)
         import :: c_char, c_size_t, c_int32_t
         character(kind=c_char), dimension(*), intent(in) :: name
         integer(c_size_t), value :: len
         integer(c_int32_t) :: handle
      end function c_sp_region_register_n

      function c_sp_region_register_at_n(name, len, file, file_len, line) &
            bind(C, name="sp_region_register_at_n") result(handle)
         import :: c_char, c_size_t, c_int32_t
         character(kind=c_char), dimension(*), intent(in) :: name
         integer(c_size_t), value :: len
         character(kind=c_char), dimension(*), intent(in) :: file
         integer(c_size_t), value :: file_len
         integer(c_int32_t), value :: line
         integer(c_int32_t) :: handle
      end function c_sp_region_register_at_n

      function c_sp_set_metadata_padded(key, key_len, value, value_len) &
            bind(C, name="sp_set_metadata_padded") result(rc)
         import :: c_char, c_size_t, c_int
         character(kind=c_char), dimension(*), intent(in) :: key
         integer(c_size_t), value :: key_len
         character(kind=c_char), dimension(*), intent(in) :: value
         integer(c_size_t), value :: value_len
         integer(c_int) :: rc
      end function c_sp_set_metadata_padded

      function c_sp_region_start_padded(name, len) bind(C, name="sp_region_start_padded") result(rc)
         import :: c_char, c_size_t, c_int
         character(kind=c_char), dimension(*), intent(in) :: name
         integer(c_size_t), value :: len
         integer(c_int) :: rc
      end function c_sp_region_start_padded

      function c_sp_region_stop_padded(name, len) bind(C, name="sp_region_stop_padded") result(rc)
         import :: c_char, c_size_t, c_int
         character(kind=c_char), dimension(*), intent(in) :: name
         integer(c_size_t), value :: len
         integer(c_int) :: rc
      end function c_sp_region_stop_padded

      function c_sp_region_start_id(handle) bind(C, name="sp_region_start_id") result(rc)
         import :: c_int32_t, c_int
         integer(c_int32_t), value :: handle
         integer(c_int) :: rc
      end function c_sp_region_start_id

      function c_sp_region_stop_id(handle) bind(C, name="sp_region_stop_id") result(rc)
         import :: c_int32_t, c_int
         integer(c_int32_t), value :: handle
         integer(c_int) :: rc
      end function c_sp_region_stop_id

      function c_sp_region_add_flops(handle, flops) bind(C, name="sp_region_add_flops") result(rc)
         import :: c_int32_t, c_int, c_double
         integer(c_int32_t), value :: handle
         real(c_double), value :: flops
         integer(c_int) :: rc
      end function c_sp_region_add_flops

      function c_sp_region_add_bytes(handle, bytes) bind(C, name="sp_region_add_bytes") result(rc)
         import :: c_int32_t, c_int, c_double
         integer(c_int32_t), value :: handle
         real(c_double), value :: bytes
         integer(c_int) :: rc
      end function c_sp_region_add_bytes

      function c_sp_region_get_stats(handle, stats) bind(C, name="sp_region_get_stats") result(rc)
         import :: c_int32_t, c_int, sp_stats_t
         integer(c_int32_t), value :: handle
         type(sp_stats_t), intent(inout) :: stats
         integer(c_int) :: rc
      end function c_sp_region_get_stats

      function c_sp_print_summary() bind(C, name="sp_print_summary") result(rc)
         import :: c_int
         integer(c_int) :: rc
      end function c_sp_print_summary

      function c_sp_start_sampling(hz) bind(C, name="sp_start_sampling") result(rc)
         import :: c_int
         integer(c_int), value :: hz
         integer(c_int) :: rc
      end function c_sp_start_sampling

      function c_sp_stop_sampling() bind(C, name="sp_stop_sampling") result(rc)
         import :: c_int
         integer(c_int) :: rc
      end function c_sp_stop_sampling

      function c_sp_is_disabled() bind(C, name="sp_is_disabled") result(rc)
         import :: c_int
         integer(c_int) :: rc
      end function c_sp_is_disabled

      function c_sp_finalize() bind(C, name="sp_finalize") result(rc)
         import :: c_int
         integer(c_int) :: rc
      end function c_sp_finalize

      function c_sp_last_error() bind(C, name="sp_last_error") result(msg)
         import :: c_ptr
         type(c_ptr) :: msg
      end function c_sp_last_error

      function c_sp_status_string(status) bind(C, name="sp_status_string") result(msg)
         import :: c_ptr, c_int
         integer(c_int), value :: status
         type(c_ptr) :: msg
      end function c_sp_status_string

      function c_sp_version() bind(C, name="sp_version") result(version)
         import :: c_ptr
         type(c_ptr) :: version
      end function c_sp_version

      function c_strlen(s) bind(C, name="strlen") result(n)
         import :: c_ptr, c_size_t
         type(c_ptr), value :: s
         integer(c_size_t) :: n
      end function c_strlen
   end interface

contains

   !> Start profiling. Every argument is optional:
   !>   file_path  output file (default: $SCOPE_PROFILER_FILE, else profiling_data.h5);
   !>              trailing blanks are ignored, a blank path counts as not given
   !>   use_likwid collect LIKWID counters (default: $SCOPE_PROFILER_LIKWID, else off)
   !>   comm       MPI communicator to profile over, an integer handle as from `use mpi`
   !>              (with `use mpi_f08` pass comm%MPI_VAL); default MPI_COMM_WORLD when
   !>              MPI is initialized
   !>   verbosity  0 silent, 1 summary table at finalize, 2 more notes
   !>              (default: $SCOPE_PROFILER_VERBOSE, else 1)
   !>   ierr       status (SP_OK, SP_ALREADY_SET_UP, or an SP_ERR_* code)
   !>   layout     "regions", "columnar" or "aggregate" (default: $SCOPE_PROFILER_LAYOUT,
   !>              else regions up to 16 ranks, columnar above; see docs/layouts.md)
   !>   clock      "auto", "tsc" or "monotonic" (default: $SCOPE_PROFILER_CLOCK, else "auto";
   !>              see docs/clock.md); a blank value counts as not given
   !>   perf_events perf events to count per region, e.g. "task-clock,cycles,flops"
   !>              (default: $SCOPE_PROFILER_PERF_EVENTS, else none)
   !>   perf_regions the regions that count them: glob patterns, e.g. "solve*,io"
   !>              (default: $SCOPE_PROFILER_PERF_REGIONS, else every region)
   !> The run is recorded with language "Fortran".
   subroutine sp_setup(file_path, use_likwid, comm, verbosity, ierr, layout, clock, perf_events, perf_regions)
      character(len=*), intent(in), optional :: file_path
      logical, intent(in), optional :: use_likwid
      integer, intent(in), optional :: comm
      integer, intent(in), optional :: verbosity
      integer, intent(out), optional :: ierr
      character(len=*), intent(in), optional :: layout
      character(kind=c_char), dimension(:), allocatable, target :: layout_c
      character(len=*), intent(in), optional :: clock
      character(len=*), intent(in), optional :: perf_events
      character(len=*), intent(in), optional :: perf_regions
      type(sp_options_t) :: options
      character(kind=c_char), dimension(:), allocatable, target :: path
      character(kind=c_char), dimension(:), allocatable, target :: clock_c
      character(kind=c_char), dimension(:), allocatable, target :: events
      character(kind=c_char), dimension(:), allocatable, target :: regions
      character(kind=c_char), dimension(8), target :: language
      integer(c_int) :: rc

      rc = c_sp_options_init(options)
      if (rc /= SP_OK) then
         if (present(ierr)) ierr = int(rc)
         return
      end if
      if (present(file_path)) then
         if (len_trim(file_path) > 0) then   ! a blank path means "not given"
            call to_c_string(file_path, path)
            options%file_path = c_loc(path)
         end if
      end if
      if (present(use_likwid)) then
         options%use_likwid = merge(1_c_int32_t, 0_c_int32_t, use_likwid)
      end if
      if (present(verbosity)) options%verbosity = int(verbosity, c_int32_t)
      if (present(comm)) then
         options%comm = int(comm, c_int32_t)
         options%has_comm = 1_c_int32_t
      end if
      if (present(layout)) then
         if (len_trim(layout) > 0) then
            call to_c_string(layout, layout_c)
            options%layout = c_loc(layout_c)
         end if
      end if
      if (present(clock)) then
         if (len_trim(clock) > 0) then
            call to_c_string(adjustl(clock), clock_c)
            options%clock = c_loc(clock_c)
         end if
      end if
      if (present(perf_events)) then
         if (len_trim(perf_events) > 0) then
            call to_c_string(perf_events, events)
            options%perf_events = c_loc(events)
         end if
      end if
      if (present(perf_regions)) then
         if (len_trim(perf_regions) > 0) then
            call to_c_string(perf_regions, regions)
            options%perf_regions = c_loc(regions)
         end if
      end if
      call to_c_chars("Fortran", language)
      options%language = c_loc(language)
      rc = c_sp_setup(options)
      switched_off = c_sp_is_disabled()
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_setup

   !> Statistics of region `handle` over every thread's completed calls so far (count,
   !> total_ns, min_ns, max_ns, exclusive_ns), without stopping the recording threads.
   subroutine sp_region_get_stats(handle, stats, ierr)
      integer, intent(in) :: handle
      type(sp_stats_t), intent(out) :: stats
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      stats%struct_size = int(storage_size(stats) / 8, c_size_t)
      rc = c_sp_region_get_stats(int(handle, c_int32_t), stats)
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_get_stats

   !> Record run metadata of your own, `key` = `value` (trailing blanks ignored), between
   !> sp_setup and sp_finalize on any rank; stored as `user.<key>` (see the C header's
   !> sp_set_metadata for the rules). Integers: pass them as text, e.g. write(buf,'(I0)') n.
   subroutine sp_set_metadata(key, value, ierr)
      character(len=*), intent(in) :: key
      character(len=*), intent(in) :: value
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_set_metadata_padded(key, int(len(key), c_size_t), value, int(len(value), c_size_t))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_set_metadata

   !> Print the summary table of this process's completed calls so far to stdout.
   subroutine sp_print_summary(ierr)
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      flush(6)
      rc = c_sp_print_summary()
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_print_summary

   !> Start sampling every recording thread `hz` times per second of its CPU time (1 to
   !> 10000): the source lines inside each region (docs/sampling.md). While sampling runs, a
   !> new rate replaces the old one. SP_ERR_UNSUPPORTED where no way to sample exists.
   subroutine sp_start_sampling(hz, ierr)
      integer, intent(in) :: hz
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_start_sampling(int(hz, c_int))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_start_sampling

   !> Stop sampling; the samples so far are written at sp_finalize.
   subroutine sp_stop_sampling(ierr)
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_stop_sampling()
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_stop_sampling

   !> Stop profiling and write the file (SP_ALREADY_FINALIZED if called twice).
   subroutine sp_finalize(ierr)
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_finalize()
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_finalize

   !> Start a call of region `name` (trailing blanks ignored) on the calling thread.
   subroutine sp_region_start(name, ierr)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      if (switched_off /= 0) then   ! SCOPE_PROFILER_DISABLE=1: no call into the library
         if (present(ierr)) ierr = SP_OK
         return
      end if
      rc = c_sp_region_start_padded(name, int(len(name), c_size_t))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_start

   !> Stop the innermost call of region `name` on the calling thread.
   subroutine sp_region_stop(name, ierr)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      if (switched_off /= 0) then   ! SCOPE_PROFILER_DISABLE=1: no call into the library
         if (present(ierr)) ierr = SP_OK
         return
      end if
      rc = c_sp_region_stop_padded(name, int(len(name), c_size_t))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_stop

   !> Register region `name` once and return its handle (>= 0) for sp_region_start_id and
   !> sp_region_stop_id; on failure the handle is the negative status, as is `ierr`.
   !> Optional `file` and `line` record where the region is defined (stored as its
   !> source_file and source_lineno); in preprocessed sources (.F90, or -cpp):
   !>     h = sp_region_register("kernel", file=__FILE__, line=__LINE__)
   !> The first location given for a name is kept; another one warns once on stderr.
   !> A `file` without `line` records the file only; a `line` without `file` records nothing.
   function sp_region_register(name, ierr, file, line) result(handle)
      character(len=*), intent(in) :: name
      integer, intent(out), optional :: ierr
      character(len=*), intent(in), optional :: file
      integer, intent(in), optional :: line
      integer :: handle
      character(kind=c_char), dimension(1) :: no_file
      integer(c_int32_t) :: c_line
      if (present(file) .or. present(line)) then
         c_line = 0
         if (present(line)) c_line = int(line, c_int32_t)
         if (present(file)) then
            handle = int(c_sp_region_register_at_n(name, int(len_trim(name), c_size_t), &
               file, int(len_trim(file), c_size_t), c_line))
         else
            no_file(1) = c_null_char
            handle = int(c_sp_region_register_at_n(name, int(len_trim(name), c_size_t), &
               no_file, 0_c_size_t, c_line))
         end if
      else
         handle = int(c_sp_region_register_n(name, int(len_trim(name), c_size_t)))
      end if
      if (present(ierr)) ierr = min(handle, SP_OK)
   end function sp_region_register

   !> Start a call of the region with this handle: the hot-loop form.
   subroutine sp_region_start_id(handle, ierr)
      integer, intent(in) :: handle
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      if (switched_off /= 0) then   ! SCOPE_PROFILER_DISABLE=1: no call into the library
         if (present(ierr)) ierr = SP_OK
         return
      end if
      rc = c_sp_region_start_id(int(handle, c_int32_t))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_start_id

   !> Stop the innermost call of the region with this handle.
   subroutine sp_region_stop_id(handle, ierr)
      integer, intent(in) :: handle
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      if (switched_off /= 0) then   ! SCOPE_PROFILER_DISABLE=1: no call into the library
         if (present(ierr)) ierr = SP_OK
         return
      end if
      rc = c_sp_region_stop_id(int(handle, c_int32_t))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_stop_id

   !> Add your own count of floating-point operations (e.g. 2*n**3 for a matrix product)
   !> to the region with this handle, on the calling thread; inside or outside the region.
   subroutine sp_region_add_flops(handle, flops, ierr)
      integer, intent(in) :: handle
      double precision, intent(in) :: flops
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_region_add_flops(int(handle, c_int32_t), real(flops, c_double))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_add_flops

   !> Add your own count of bytes moved to the region with this handle (as sp_region_add_flops).
   subroutine sp_region_add_bytes(handle, bytes, ierr)
      integer, intent(in) :: handle
      double precision, intent(in) :: bytes
      integer, intent(out), optional :: ierr
      integer(c_int) :: rc
      rc = c_sp_region_add_bytes(int(handle, c_int32_t), real(bytes, c_double))
      if (present(ierr)) ierr = int(rc)
   end subroutine sp_region_add_bytes

   !> The message of the last error on the calling thread ("" if none).
   function sp_last_error() result(message)
      character(len=:), allocatable :: message
      message = from_c_string(c_sp_last_error())
   end function sp_last_error

   !> A description of a status code.
   function sp_status_string(status) result(message)
      integer, intent(in) :: status
      character(len=:), allocatable :: message
      message = from_c_string(c_sp_status_string(int(status, c_int)))
   end function sp_status_string

   !> The library version, e.g. "0.1.0".
   function sp_version() result(version)
      character(len=:), allocatable :: version
      version = from_c_string(c_sp_version())
   end function sp_version

   ! ---------------------------------------------------------------------------------
   ! Helpers (private). Only sp_setup copies strings; the region calls never do.

   !> trim(s) followed by a NUL, as an interoperable character array.
   subroutine to_c_string(s, buf)
      character(len=*), intent(in) :: s
      character(kind=c_char), dimension(:), allocatable, intent(out) :: buf
      integer :: i, n
      n = len_trim(s)
      allocate (buf(n + 1))
      do i = 1, n
         buf(i) = s(i:i)
      end do
      buf(n + 1) = c_null_char
   end subroutine to_c_string

   !> s followed by a NUL into a fixed buffer of size len(s) + 1.
   subroutine to_c_chars(s, buf)
      character(len=*), intent(in) :: s
      character(kind=c_char), dimension(:), intent(out) :: buf
      integer :: i
      do i = 1, len(s)
         buf(i) = s(i:i)
      end do
      buf(len(s) + 1) = c_null_char
   end subroutine to_c_chars

   !> Copy a NUL-terminated C string into a Fortran string ("" for NULL).
   function from_c_string(p) result(s)
      type(c_ptr), intent(in) :: p
      character(len=:), allocatable :: s
      character(kind=c_char), dimension(:), pointer :: chars
      integer :: i, n
      if (.not. c_associated(p)) then
         s = ""
         return
      end if
      n = int(c_strlen(p))
      call c_f_pointer(p, chars, [n])
      allocate (character(len=n) :: s)
      do i = 1, n
         s(i:i) = chars(i)
      end do
   end function from_c_string

end module scope_profiler
