! Run metadata from Fortran: sp_set_metadata with blank-padded character variables, a refused
! key through ierr, and a call after sp_finalize. Usage: metadata OUTPUT.h5
program metadata
   use scope_profiler
   implicit none
   character(len=256) :: path
   character(len=32) :: size_text
   integer :: ierr
   call get_command_argument(1, path)
   call sp_setup(file_path=trim(path), ierr=ierr)
   write (size_text, '(I0)') 4096
   call sp_set_metadata('problem_size', size_text, ierr)
   print '(A,I0)', 'STATUS size ', ierr
   call sp_set_metadata('input_deck   ', 'cube.inp   ', ierr)
   print '(A,I0)', 'STATUS deck ', ierr
   call sp_set_metadata('bad/key', 'x', ierr)
   print '(A,I0)', 'STATUS slash ', ierr
   call sp_region_start('work')
   call sp_region_stop('work')
   call sp_finalize(ierr)
   call sp_set_metadata('late', '1', ierr)
   print '(A,I0)', 'STATUS late ', ierr
end program metadata
