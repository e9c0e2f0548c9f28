/* Loads the library named by KOKKOS_TOOLS_LIBS and calls its callbacks the way Kokkos 4 does
 * (a stand-in for a Kokkos 4 build, which Debian 12 does not have: the real Kokkos 3.4 is
 * tested too): kokkosp_init_library with the given interface version,
 * kokkosp_request_tool_settings, kernels with Kokkos 4's device ids (execution space in the
 * top 8 bits), fences, hostile labels (NULL, empty, not UTF-8, over-long), a bad kernel id.
 * `kokkos4_driver VERSION N` runs N rounds; prints the tool's settings answer. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct settings { bool requires_global_fencing; bool padding[255]; };
typedef void (*init_f)(int, uint64_t, uint32_t, void *);
typedef void (*fin_f)(void);
typedef void (*begin_f)(const char *, uint32_t, uint64_t *);
typedef void (*end_f)(uint64_t);
typedef void (*push_f)(const char *);
typedef void (*pop_f)(void);
typedef void (*settings_f)(uint32_t, struct settings *);

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) { fprintf(stderr, "missing %s\n", name); exit(2); }
  return p;
}

int main(int argc, char **argv) {
  const char *libs = getenv("KOKKOS_TOOLS_LIBS");
  if (!libs || argc < 3) { fprintf(stderr, "usage: KOKKOS_TOOLS_LIBS=lib %s VERSION N\n", argv[0]); return 2; }
  uint64_t version = strtoull(argv[1], NULL, 10);
  int n = atoi(argv[2]);
  void *h = dlopen(libs, RTLD_NOW | RTLD_GLOBAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  init_f init = (init_f)sym(h, "kokkosp_init_library");
  fin_f fin = (fin_f)sym(h, "kokkosp_finalize_library");
  settings_f req = (settings_f)sym(h, "kokkosp_request_tool_settings");
  begin_f bfor = (begin_f)sym(h, "kokkosp_begin_parallel_for");
  end_f efor = (end_f)sym(h, "kokkosp_end_parallel_for");
  begin_f bred = (begin_f)sym(h, "kokkosp_begin_parallel_reduce");
  end_f ered = (end_f)sym(h, "kokkosp_end_parallel_reduce");
  begin_f bfence = (begin_f)sym(h, "kokkosp_begin_fence");
  end_f efence = (end_f)sym(h, "kokkosp_end_fence");
  push_f push = (push_f)sym(h, "kokkosp_push_profile_region");
  pop_f pop = (pop_f)sym(h, "kokkosp_pop_profile_region");

  struct settings s;
  memset(&s, 1, sizeof s);
  /* Kokkos 4 asks for the settings before init. */
  req(1, &s);
  req(1, NULL);
  init(0, version, 0, NULL);
  const uint32_t serial = 0u << 24, cuda = (2u << 24) | 1u;
  static char longname[5000];
  memset(longname, 'L', sizeof longname - 1);
  for (int i = 0; i < n; i++) {
    uint64_t k = 0, r = 0, f = 0, c = 0;
    push("k4_step");
    bfor("k4_for", serial, &k);
    efor(k);
    bred("k4_reduce", cuda, &r);
    ered(r);
    bfence("k4_fence", serial, &f);
    efence(f);
    bfor(NULL, serial, &c); efor(c);
    bfor("", serial, &c); efor(c);
    bfor("bad \xff\xfe label", serial, &c); efor(c);
    bfor(longname, serial, &c); efor(c);
    bfor("k4_for", serial, NULL);
    pop();
  }
  efor(987654321);
  efor(UINT64_MAX);
  pop();
  fin();
  printf("requires_global_fencing %d\n", (int)s.requires_global_fencing);
  return 0;
}
