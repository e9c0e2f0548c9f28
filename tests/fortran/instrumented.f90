! A Fortran program built with -finstrument-functions and linked with the library: a module
! procedure is recorded as physics::flux, an external procedure as work.
module physics
  implicit none
contains
  subroutine flux(x)
    real(8), intent(inout) :: x
    x = x * 1.5d0 + 1
  end subroutine flux
end module physics

subroutine work(x)
  implicit none
  real(8), intent(inout) :: x
  x = x - 0.25d0
end subroutine work

program instrumented
  use physics
  implicit none
  real(8) :: y
  integer :: i
  external :: work
  y = 1
  do i = 1, 9
     call flux(y)
  end do
  do i = 1, 4
     call work(y)
  end do
  print '(a,f0.2)', 'done ', y
end program instrumented
