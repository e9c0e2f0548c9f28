! OpenMP constructs in Fortran, recorded through the OpenMP tools interface without annotation
! (gfortran -fopenmp, run on LLVM's libomp). The test finds each construct's line by the marker
! comment on it. Usage: omp_constructs_f [PARALLEL_REGIONS]
program omp_constructs
  use omp_lib
  implicit none
  integer :: n, r, i
  character(len=16) :: arg
  real(8) :: s
  n = 5
  if (command_argument_count() > 0) then
     call get_command_argument(1, arg)
     read (arg, *) n
  end if
  s = 0
  do r = 1, n
     !$omp parallel num_threads(2) reduction(+:s) ! PARALLEL
     s = s + omp_get_thread_num()
     !$omp barrier ! BARRIER
     !$omp do schedule(dynamic) ! LOOP
     do i = 1, 8
        s = s + i
     end do
     !$omp end do
     !$omp end parallel
  end do
  print '(a,i0,a,f0.1)', 'done ', n, ' ', s
end program omp_constructs
