/* A program annotated with NVTX only (plus regions of its own with -DWITH_SP), run with the
 * library as its NVTX injection: push/pop on two threads (A, W and Ex forms), a domain with a
 * registered string, start/end ranges (started on the main thread and ended on the worker
 * inside a push range of its own, started on the worker in a domain and ended on the main
 * thread, and overlapping ranges of one name on one thread), marks, a thread name, and misuse
 * (a pop without a push, an end of an unknown range, an end twice, a range never ended, NULL
 * and malformed messages). `nvtx_app N` runs the loop N times. */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>
#ifdef WITH_SP
#include "scope_profiler.h"
#define SP_START(n) sp_region_start(n)
#define SP_STOP(n) sp_region_stop(n)
#else
#define SP_START(n) ((void)0)
#define SP_STOP(n) ((void)0)
#endif

static int n = 3;
static nvtxRangeId_t handed[64], back[64];
static nvtxDomainHandle_t dom;
static nvtxEventAttributes_t ascii;

static void *worker(void *arg) {
  (void)arg;
  nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), "nvtx worker");
  for (int i = 0; i < n; i++) {
    nvtxRangePushA("nv_worker");
    nvtxRangePushW(L"nv_w\u00e9de");
    nvtxRangePop();
    /* The ranges the main thread started end here, inside a push range of this thread's:
     * they enclose it in time, but nest in nothing. */
    nvtxRangeEnd(handed[i]);
    nvtxRangePop();
    /* Ranges of the domain that the main thread ends. */
    back[i] = nvtxDomainRangeStartEx(dom, &ascii);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) n = atoi(argv[1]);
  if (n > 64) n = 64;
  dom = nvtxDomainCreateA("nv_domain");
  nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "nv_registered");
  nvtxEventAttributes_t ex;
  memset(&ex, 0, sizeof ex);
  ex.version = NVTX_VERSION;
  ex.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ex.colorType = NVTX_COLOR_ARGB;
  ex.color = 0xff00ff00;
  ex.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  ex.message.registered = reg;
  ascii = ex;
  ascii.messageType = NVTX_MESSAGE_TYPE_ASCII;
  ascii.message.ascii = "nv_ex";
  for (int i = 0; i < n; i++) handed[i] = nvtxRangeStartA("nv_handed");
  for (int i = 0; i < n; i++) {
    nvtxRangePushA("nv_outer");
    SP_START("sp_mine");
    nvtxDomainRangePushEx(dom, &ex);
    nvtxRangePushEx(&ascii);
    nvtxRangePop();
    nvtxDomainRangePop(dom);
    SP_STOP("sp_mine");
    nvtxMarkA("nv_mark");
    nvtxDomainMarkEx(dom, &ascii);
    /* Two ranges of one name on this thread, overlapping without nesting. */
    nvtxRangeId_t a = nvtxRangeStartA("nv_overlap");
    nvtxRangeId_t b = nvtxRangeStartA("nv_overlap");
    nvtxRangeEnd(a);
    nvtxRangeEnd(b);
    nvtxRangePop();
  }
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);
  nvtxRangePushA("nv_after");
  for (int i = 0; i < n; i++) nvtxDomainRangeEnd(dom, back[i]);
  nvtxRangePop();
  /* A range never ended: open at the end of the run. */
  nvtxRangeStartA("nv_left_open");
  /* Misuse: each said once and ignored. */
  nvtxRangePop();
  nvtxRangeEnd(123456789);
  nvtxRangeEnd(handed[0]);
  nvtxRangePushA(NULL);
  nvtxRangePop();
  nvtxEventAttributes_t bad = ascii;
  bad.size = 8;
  nvtxRangePushEx(&bad);
  nvtxRangePop();
  nvtxEventAttributes_t nul = ascii;
  nul.message.ascii = NULL;
  nvtxMarkEx(&nul);
  nvtxRangePushA("\xff\xfe not utf8");
  nvtxRangePop();
  printf("done %d\n", n);
  return 0;
}
