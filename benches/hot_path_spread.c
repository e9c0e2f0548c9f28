/* The spread of the handle pair over blocks of 500 pairs (mean, percentiles, max, ns per pair):
 * where hot_path_min.c keeps the least-disturbed block, this shows the rare stalls (a page
 * fault of fresh memory, a huge page first touched). Usage: hot_path_spread [BLOCKS=4000]
 * Build: cc -O2 -Iinclude benches/hot_path_spread.c -Ltarget/release -Wl,-rpath,$PWD/target/release -lscope_profiler */
#include <scope_profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int blocks=argc>1?atoi(argv[1]):4000, n=500;
  sp_options o; sp_options_init(&o); o.file_path="/tmp/sp_hpd.h5"; o.verbosity=0;
  if(sp_setup(&o)!=SP_OK) return 1;
  int32_t h=sp_region_register("x");
  double *v=malloc(blocks*sizeof(double)), tot=0;
  for(int b=0;b<blocks;b++){
    double t1=now();
    for(int i=0;i<n;i++){sp_region_start_id(h);sp_region_stop_id(h);}
    double t2=now(); v[b]=(t2-t1)/n; tot+=t2-t1;
  }
  qsort(v,blocks,sizeof(double),cmp);
  printf("mean %.2f  p10 %.2f p50 %.2f p90 %.2f p99 %.2f p99.9 %.2f max %.2f\n",tot/blocks/n,v[blocks/10],v[blocks/2],v[blocks*9/10],v[blocks*99/100],v[blocks*999/1000],v[blocks-1]);
  sp_finalize(); return 0;
}
