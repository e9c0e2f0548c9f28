! The Fortran module end to end: every routine with and without ierr, names with
! trailing blanks, '/', nesting, recursion, the handle form in a hot loop, and misuse
! reported through ierr. Prints "EXPECT<TAB>calls<TAB>name" for every region it records
! (tests/fortran_api.rs compares them with the file) and "DONE failures=N".
! Usage: api_usage <output file>
program api_usage
   use scope_profiler
   implicit none
   integer :: failures, ierr, h, h2, h_bad, i
   character(len=32) :: padded
   character(len=1100) :: too_long
   character(len=:), allocatable :: path, msg
   integer :: path_len

   failures = 0

   ! Before sp_setup: calls are refused, but never fatal.
   call sp_region_start("early", ierr)
   call check(ierr == SP_ERR_NOT_INITIALIZED, "start before setup", ierr)
   call sp_region_stop("early")
   call sp_finalize(ierr)
   call check(ierr == SP_ERR_NOT_INITIALIZED, "finalize before setup", ierr)

   call get_command_argument(1, length=path_len)
   allocate (character(len=path_len) :: path)
   call get_command_argument(1, path)
   ! Trailing blanks of file_path are ignored, like those of region names.
   call sp_setup(file_path=path//"   ", use_likwid=.false., verbosity=0, ierr=ierr, clock=" monotonic ")
   call check(ierr == SP_OK, "setup", ierr)
   call sp_setup(ierr=ierr)
   call check(ierr == SP_ALREADY_SET_UP, "second setup", ierr)

   ! By name, without ierr.
   do i = 1, 3
      call sp_region_start("solve")
      call work(i)
      call sp_region_stop("solve")
   end do
   call expect(3, "solve")

   ! A blank-padded variable: the name is its trimmed value.
   padded = "padded name"
   do i = 1, 2
      call sp_region_start(padded, ierr)
      call check(ierr == SP_OK, "start padded", ierr)
      call sp_region_stop(padded, ierr)
      call check(ierr == SP_OK, "stop padded", ierr)
   end do
   call expect(2, "padded name")

   ! '/' in a name.
   call sp_region_start("io/write")
   call sp_region_stop("io/write")
   call expect(1, "io/write")

   ! Nesting.
   do i = 1, 5
      call sp_region_start("outer")
      call sp_region_start("inner")
      call work(i)
      call sp_region_stop("inner")
      call sp_region_stop("outer")
   end do
   call expect(5, "outer")
   call expect(5, "inner")

   ! Recursion.
   call recurse(4)
   call expect(4, "recurse")

   ! The handle form in a hot loop.
   h = sp_region_register("kernel", ierr)
   call check(ierr == SP_OK .and. h >= 0, "register", ierr)
   h2 = sp_region_register("kernel     ")
   call check(h2 == h, "register again gives the same handle", h2)
   do i = 1, 1000
      call sp_region_start_id(h, ierr)
      if (ierr /= SP_OK) call check(.false., "start_id", ierr)
      call sp_region_stop_id(h, ierr)
      if (ierr /= SP_OK) call check(.false., "stop_id", ierr)
   end do
   do i = 1, 10
      call sp_region_start_id(h)
      call sp_region_stop_id(h)
   end do
   call expect(1010, "kernel")

   ! Misuse, reported through ierr; nothing is recorded.
   call sp_region_start("", ierr)
   call check(ierr == SP_ERR_EMPTY_NAME, "empty name", ierr)
   call sp_region_start("     ", ierr)
   call check(ierr == SP_ERR_EMPTY_NAME, "blank name", ierr)
   call sp_region_stop("never started", ierr)
   call check(ierr == SP_ERR_UNMATCHED_STOP, "stop without start", ierr)
   msg = sp_last_error()
   call check(index(msg, "never started") > 0, "last error names the region: "//msg, 0)
   call sp_region_stop("solve", ierr)
   call check(ierr == SP_ERR_UNMATCHED_STOP, "stop of a closed region", ierr)
   call sp_region_start_id(-5, ierr)
   call check(ierr == SP_ERR_INVALID_HANDLE, "negative handle", ierr)
   call sp_region_stop_id(99999, ierr)
   call check(ierr == SP_ERR_INVALID_HANDLE, "unknown handle", ierr)
   too_long = repeat("x", len(too_long))
   call sp_region_start(too_long, ierr)
   call check(ierr == SP_ERR_NAME_TOO_LONG, "name too long", ierr)
   h_bad = sp_region_register("", ierr)
   call check(ierr == SP_ERR_EMPTY_NAME .and. h_bad == SP_ERR_EMPTY_NAME, "register empty name", ierr)
   ! The same misuse without ierr must not stop the program.
   call sp_region_stop("also never started")
   call sp_region_start("")
   call sp_region_start_id(-1)

   call check(sp_status_string(SP_ERR_EMPTY_NAME) == "the region name is empty", &
              "status string: "//sp_status_string(SP_ERR_EMPTY_NAME), 0)
   call check(sp_status_string(SP_OK) == "success", "status string of SP_OK", 0)
   print '(a,a)', "VERSION ", sp_version()

   call sp_finalize(ierr)
   call check(ierr == SP_OK, "finalize", ierr)
   call sp_finalize(ierr)
   call check(ierr == SP_ALREADY_FINALIZED, "second finalize", ierr)

   ! After finalize: refused, recorded nowhere, not fatal.
   call sp_region_start("after", ierr)
   call check(ierr == SP_ERR_FINALIZED, "start after finalize", ierr)
   call sp_region_stop("after", ierr)
   call check(ierr == SP_ERR_FINALIZED, "stop after finalize", ierr)
   call sp_region_start_id(h, ierr)
   call check(ierr == SP_ERR_FINALIZED, "start_id after finalize", ierr)
   call sp_region_stop_id(h, ierr)
   call check(ierr == SP_ERR_FINALIZED, "stop_id after finalize", ierr)
   h_bad = sp_region_register("after", ierr)
   call check(ierr == SP_ERR_FINALIZED .and. h_bad < 0, "register after finalize", ierr)
   call sp_setup(ierr=ierr)
   call check(ierr == SP_ERR_FINALIZED, "setup after finalize", ierr)
   call sp_region_start("after, no ierr")
   call sp_region_stop("after, no ierr")
   call sp_finalize()

   print '(a,i0)', "DONE failures=", failures

contains

   subroutine check(ok, what, status)
      logical, intent(in) :: ok
      character(len=*), intent(in) :: what
      integer, intent(in) :: status
      if (.not. ok) then
         failures = failures + 1
         print '(a,a,a,i0,a,a)', "FAIL ", what, " (status ", status, ") ", sp_last_error()
      end if
   end subroutine check

   subroutine expect(calls, name)
      integer, intent(in) :: calls
      character(len=*), intent(in) :: name
      print '(a,a,i0,a,a)', "EXPECT", achar(9), calls, achar(9), name
   end subroutine expect

   subroutine work(n)
      integer, intent(in) :: n
      integer :: k
      real(8) :: x
      x = 0
      do k = 1, 1000 * n
         x = x + sqrt(real(k, 8))
      end do
      if (x < 0) print *, x
   end subroutine work

   recursive subroutine recurse(depth)
      integer, intent(in) :: depth
      call sp_region_start("recurse")
      if (depth > 1) call recurse(depth - 1)
      call sp_region_stop("recurse")
   end subroutine recurse

end program api_usage
