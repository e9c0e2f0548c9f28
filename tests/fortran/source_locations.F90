! Source locations from Fortran: sp_region_register with file=__FILE__ and line=__LINE__
! in a preprocessed source, with only a line, and a second place for the same name.
! Prints "AT<TAB>name<TAB>line", "EXPECT<TAB>calls<TAB>name" and "DONE failures=N".
! Usage: source_locations <output file>
program source_locations
   use scope_profiler
   implicit none
   integer :: ierr, h, h2, i, failures, path_len
   character(len=:), allocatable :: path

   failures = 0
   call get_command_argument(1, length=path_len)
   allocate (character(len=path_len) :: path)
   call get_command_argument(1, path)
   call sp_setup(file_path=path, use_likwid=.false., verbosity=0, ierr=ierr)
   if (ierr /= SP_OK) failures = failures + 1

   h = sp_region_register("fortran kernel", ierr, file=__FILE__, line=__LINE__)
   if (ierr /= SP_OK .or. h < 0) failures = failures + 1
   print '(a,i0)', "AT"//achar(9)//"fortran kernel"//achar(9), __LINE__ - 2
   do i = 1, 20
      call sp_region_start_id(h)
      call sp_region_stop_id(h)
   end do
   print '(a)', "EXPECT"//achar(9)//"20"//achar(9)//"fortran kernel"
   ! Another place: the same handle, the first location kept.
   h2 = sp_region_register("fortran kernel", file="other.F90", line=3)
   if (h2 /= h) failures = failures + 1
   ! A line without a file records no location; a negative line is refused.
   h2 = sp_region_register("line only", line=12)
   call sp_region_start_id(h2)
   call sp_region_stop_id(h2)
   print '(a)', "EXPECT"//achar(9)//"1"//achar(9)//"line only"
   h2 = sp_region_register("bad line", ierr, file=__FILE__, line=-1)
   if (ierr /= SP_ERR_INVALID_ARGUMENT) failures = failures + 1

   call sp_finalize(ierr)
   if (ierr /= SP_OK) failures = failures + 1
   print '(a,i0)', "DONE failures=", failures
end program source_locations
