! matmul (Fortran): a compute-bound triple loop and a memory-bound streaming update,
! each its own region, profiled with the scope_profiler module.
!
!   matmul_f [N] [stream_len] [sweeps]      (defaults: N=800, 4194304 doubles, 10 sweeps)
!
! "matmul": c(i,j) = c(i,j) + a(i,k) * b(k,j) for N x N matrices (loop order j, k, i:
!           the inner loop runs down columns); 2*N^3 floating-point operations. The
!           program prints the FLOP rate it computes from them and the region's time, to
!           compare with LIKWID's "DP [MFLOP/s]" (likwid-perfctr -g FLOPS_DP -m).
! "stream": x = y + s * z over stream_len doubles per sweep, one call per sweep.
! Built with -DUSE_MPI (target matmul_f_mpi), the rows of c and the stream arrays are
! split over the ranks; each rank reports its rate, rank 0 the aggregate.
! Both regions annotate their work with sp_region_add_flops / sp_region_add_bytes (matmul:
! 2*N^3 FLOPs and the compulsory 8*(3*N^2 + N^2) bytes; stream: 2 FLOPs and 24 bytes per
! element), so `sptool inspect` shows GFLOP/s, GB/s and FLOP/byte on any machine.
! Nothing here is LIKWID specific: set SCOPE_PROFILER_LIKWID=1 under likwid-perfctr -m.
program matmul_f
   use, intrinsic :: iso_fortran_env, only: int64, real64, output_unit, error_unit
   use scope_profiler
#ifdef USE_MPI
   use mpi
#endif
   implicit none
   integer :: n, stream_len, sweeps, rank, nranks, ierr, r0, r1, rows, s0, s1, nloc
   integer :: i, j, k, s, r, matmul_region, stream_region, status
   real(real64), allocatable :: a(:, :), b(:, :), c(:, :), x(:), y(:), z(:), times(:)
   real(real64) :: bkj, t_matmul, t_stream, flop, bytes, total, slowest, sums(3), mine(2), col, row
   integer(int64) :: t0, t1, rate

   rank = 0
   nranks = 1
   status = 0
#ifdef USE_MPI
   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
#endif
   n = argument(1, 800, "N")
   stream_len = argument(2, 4194304, "stream_len")
   sweeps = argument(3, 10, "sweeps")
   ! My rows r0+1 .. r1 of c (and a); all of b.
   r0 = int(int(n, int64) * rank / nranks)
   r1 = int(int(n, int64) * (rank + 1) / nranks)
   rows = r1 - r0
   s0 = int(int(stream_len, int64) * rank / nranks)
   s1 = int(int(stream_len, int64) * (rank + 1) / nranks)
   nloc = s1 - s0

   ! Options from the environment (SCOPE_PROFILER_FILE, _LIKWID, _VERBOSE, ...).
#ifdef USE_MPI
   call sp_setup(comm=MPI_COMM_WORLD, ierr=ierr)
#else
   call sp_setup(ierr=ierr)
#endif
   if (ierr < 0) write (error_unit, '(a,a)') "matmul_f: profiling is off: ", sp_last_error()
   ! Handles: the form for hot loops (no string work per call).
   matmul_region = sp_region_register("matmul")
   stream_region = sp_region_register("stream")

   allocate (a(rows, n), b(n, n), c(rows, n), x(nloc), y(nloc), z(nloc))
   do k = 1, n
      do i = 1, rows
         a(i, k) = 0.25_real64 * modulo(r0 + i - 1 + 2 * (k - 1), 7) - 0.5_real64
      end do
   end do
   do j = 1, n
      do k = 1, n
         b(k, j) = 0.5_real64 * modulo(3 * (k - 1) + j - 1, 5) - 0.75_real64
      end do
   end do
   c = 0
   x = 0
   y = 1
   do i = 1, nloc
      z(i) = modulo(s0 + i - 1, 3)
   end do

#ifdef USE_MPI
   call MPI_Barrier(MPI_COMM_WORLD, ierr)
#endif
   ! The clock read once before it is timed: its first call resolves the runtime's symbol
   ! (tens of us), which would land inside the region and outside the program's own timing.
   call system_clock(t0, rate)
   call sp_region_start_id(matmul_region)
   call system_clock(t0, rate)
   do j = 1, n
      do k = 1, n
         bkj = b(k, j)
         do i = 1, rows
            c(i, j) = c(i, j) + a(i, k) * bkj
         end do
      end do
   end do
   call system_clock(t1)
   call sp_region_stop_id(matmul_region)
   ! This rank's share: 2 FLOPs (multiply, add) per (i, k, j).
   call sp_region_add_flops(matmul_region, 2.0d0 * rows * real(n, real64)**2)
   call sp_region_add_bytes(matmul_region, 8.0d0 * (3.0d0 * rows * n + real(n, real64)**2))
   t_matmul = real(t1 - t0, real64) / real(rate, real64)

   t_stream = 0
   do s = 1, sweeps
      call sp_region_start_id(stream_region)
      call system_clock(t0)
      x = y + (s - 0.5_real64) * z
      call system_clock(t1)
      call sp_region_stop_id(stream_region)
      call sp_region_add_flops(stream_region, 2.0d0 * nloc)
      call sp_region_add_bytes(stream_region, 24.0d0 * nloc)
      t_stream = t_stream + real(t1 - t0, real64) / real(rate, real64)
   end do

   ! Checksums of c and x, and what the sum of c must be:
   ! sum_ij c(i,j) = sum_k (sum_i a(i,k)) (sum_j b(k,j)).
   sums(1) = sum(c)
   sums(2) = sum(x)
   sums(3) = 0
   do k = 1, n
      col = sum(a(:, k))
      row = sum(b(k, :))
      sums(3) = sums(3) + col * row
   end do
   mine = [t_matmul, t_stream]
   allocate (times(2 * nranks))
#ifdef USE_MPI
   call MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
   call MPI_Gather(mine, 2, MPI_DOUBLE_PRECISION, times, 2, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
#else
   times(1:2) = mine
#endif
   if (rank == 0) then
      write (output_unit, '(*(a))') "matmul_f: N=", str(n), ", ", str(nranks), " rank(s), checksum ", &
         str_real(sums(1), "(es14.6)"), " (expected ", str_real(sums(3), "(es14.6)"), "); stream: ", str(stream_len), &
         " doubles x ", str(sweeps), " sweeps, checksum ", str_real(sums(2), "(es14.6)")
      if (abs(sums(1) - sums(3)) > 1e-9_real64 * (abs(sums(3)) + 1)) then
         write (error_unit, '(a)') "matmul_f: wrong result"
         status = 1
      end if
      slowest = 0
      do r = 0, nranks - 1
         flop = 2 * real(int(int(n, int64) * (r + 1) / nranks) - int(int(n, int64) * r / nranks), real64) &
                * real(n, real64)**2
         bytes = 24 * real(int(int(stream_len, int64) * (r + 1) / nranks) &
                           - int(int(stream_len, int64) * r / nranks), real64) * sweeps
         slowest = max(slowest, times(2 * r + 1))
         write (output_unit, '(*(a))') "rank ", str(r), ": matmul ", str_real(flop, "(f24.0)"), " flop in ", &
            str_real(times(2 * r + 1), "(f16.6)"), " s = ", &
            str_real(flop / times(2 * r + 1) * 1e-6_real64, "(f16.1)"), &
            " MFLOP/s; stream ", str_real(bytes / times(2 * r + 2) * 1e-9_real64, "(f12.2)"), " GB/s"
      end do
      total = 2 * real(n, real64)**3
      write (output_unit, '(*(a))') "total: 2*N^3 = ", str_real(total, "(f24.0)"), " flop, slowest rank ", &
         str_real(slowest, "(f16.6)"), " s = ", str_real(total / slowest * 1e-6_real64, "(f16.1)"), " MFLOP/s"
   end if
   flush (output_unit)

   call sp_finalize()
#ifdef USE_MPI
   call MPI_Finalize(ierr)
#endif
   if (status /= 0) error stop 1

contains

   !> An integer as text.
   function str(i) result(text)
      integer, intent(in) :: i
      character(len=:), allocatable :: text
      character(len=32) :: buf
      write (buf, '(i0)') i
      text = trim(buf)
   end function str

   !> A real as text in format `fmt`, without blanks; "1234." becomes "1234".
   function str_real(x, fmt) result(text)
      real(real64), intent(in) :: x
      character(len=*), intent(in) :: fmt
      character(len=:), allocatable :: text
      character(len=40) :: buf
      write (buf, fmt) x
      text = trim(adjustl(buf))
      if (text(len(text):) == ".") text = text(:len(text) - 1)
   end function str_real

   !> Positive integer command-line argument `i`, or `fallback` if absent.
   integer function argument(i, fallback, what) result(v)
      integer, intent(in) :: i, fallback
      character(len=*), intent(in) :: what
      character(len=64) :: text
      integer :: length, stat
      call get_command_argument(i, text, length, stat)
      if (stat > 0 .or. length == 0) then
         v = fallback
         return
      end if
      read (text, *, iostat=stat) v
      if (stat /= 0 .or. v < 1 .or. stat < 0) then
         write (error_unit, '(a,a,a,a,a)') "matmul_f: ", what, " must be a positive integer, not '", trim(text), "'"
         error stop 2
      end if
   end function argument

end program matmul_f
