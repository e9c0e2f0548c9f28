/* Hot-path cost on a loaded machine: the minimum over many short blocks (500 iterations)
 * of two clock_gettime calls (the floor), a handle pair, and two nested handle pairs. The
 * minimum leaves out preemption by other processes, which the medians of core_overhead.c
 * do not on a shared machine; it also leaves out the occasional page fault of fresh memory.
 * Usage: hot_path_min [BLOCKS=3000]   (layout from $SCOPE_PROFILER_LAYOUT)
 * Build: cc -O2 -Iinclude benches/hot_path_min.c -Ltarget/release -Wl,-rpath,$PWD/target/release -lscope_profiler */
#include <scope_profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  int blocks=argc>1?atoi(argv[1]):3000, n=500;
  sp_options o; sp_options_init(&o); o.file_path="/tmp/sp_hot_path_min.h5"; o.verbosity=0;
  if(sp_setup(&o)!=SP_OK) return 1;
  int32_t h=sp_region_register("x"), h2=sp_region_register("y");
  double fmin=1e18,hmin=1e18,nmin=1e18;
  struct timespec ts;
  for(int b=0;b<blocks;b++){
    double t0=now();
    for(int i=0;i<n;i++){clock_gettime(CLOCK_MONOTONIC,&ts);clock_gettime(CLOCK_MONOTONIC,&ts);}
    double t1=now();
    for(int i=0;i<n;i++){sp_region_start_id(h);sp_region_stop_id(h);}
    double t2=now();
    for(int i=0;i<n;i++){sp_region_start_id(h2);sp_region_start_id(h);sp_region_stop_id(h);sp_region_stop_id(h2);}
    double t3=now();
    if((t1-t0)/n<fmin)fmin=(t1-t0)/n;
    if((t2-t1)/n<hmin)hmin=(t2-t1)/n;
    if((t3-t2)/n<nmin)nmin=(t3-t2)/n;
  }
  printf("floor %.2f ns  handle pair %.2f ns (ratio %.3f, +%.2f ns)  nested 2 pairs %.2f ns (ratio %.3f)\n",fmin,hmin,hmin/fmin,hmin-fmin,nmin,nmin/(2*fmin));
  sp_finalize();
  return 0;
}
