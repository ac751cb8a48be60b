// fuseforge-nvrtc: compiles one kernel with NVRTC for a process that compiles
// several at once (runtime/compile_workers.h says why they are processes).
//   fuseforge-nvrtc JOB IMAGE
// reads the job file JOB, writes the cubin or PTX to IMAGE and exits 0; on
// any failure prints why on stderr and exits 1 (the caller then compiles the
// kernel itself: it reports NVRTC's error, or this failure if its own
// compile succeeds).
#include <cstdio>

#include "runtime/compile_workers.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuseforge-nvrtc JOB IMAGE\n");
    return 2;
  }
  return ff::runtime::run_compile_job(argv[1], argv[2]);
}
