// fuseforge-nvrtc: compiles one kernel with NVRTC for a process that compiles
// several at once (runtime/compile_workers.h says why they are processes).
//   fuseforge-nvrtc JOB IMAGE
// reads the job file JOB, writes the cubin or PTX to IMAGE and exits 0; on
// any failure prints why on stderr and exits 1 (the caller then compiles the
// kernel itself: it reports NVRTC's error, or this failure if its own
// compile succeeds).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/compile_workers.h"
#include "runtime/compiler.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuseforge-nvrtc JOB IMAGE\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) throw std::runtime_error(std::string("cannot read ") + argv[1]);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const ff::runtime::CompileJob job = ff::runtime::decode_job(text);
    // The caller's NVRTC, so that both compile alike (and hash alike in the cache).
    if (!job.nvrtc_library.empty()) setenv("FUSEFORGE_NVRTC", job.nvrtc_library.c_str(), 1);
    const ff::runtime::CompiledKernel k =
        ff::runtime::compile_kernel(job.source, job.name, job.arch, job.options, job.sm90a);
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out << k.image;
    if (!out.flush()) throw std::runtime_error(std::string("cannot write ") + argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuseforge-nvrtc: %s\n", e.what());
    return 1;
  }
}
