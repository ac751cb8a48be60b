#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ff::codegen {

// One generated kernel and how to call it. Parameters are, in order: a pointer
// per output, a pointer per tensor input, a double per scalar input, a long
// long per `constants` entry. The
// kernel walks `items` work items (each covering `vector_width` elements)
// with a grid-stride loop of `block`-thread blocks, `unroll` items per thread
// per iteration: a grid of ceil(items / (block * unroll)) blocks covers all.
struct KernelSource {
  std::string name;                   // the CUDA symbol, readable in profilers
  std::vector<std::string> includes;  // #include lines the source needs (kept apart: a file of many
                                      // kernels puts them first, outside any namespace)
  std::string source;                 // the code after the includes; declares the kernel FF_EXTERN_C
                                      // (C linkage for NVRTC's lookup by name, unless defined otherwise)
  std::vector<std::string> outputs;   // IR value names, parameter order
  std::vector<std::string> inputs;    // IR value names of tensor inputs
  std::vector<std::string> scalars;   // IR value names of scalar inputs
  // Values the launch passes after the scalars (a GEMM's sizes and strides):
  // kept out of the source, so that kernels of one template, tile and
  // epilogue share their code, and its compile, whatever their shapes.
  std::vector<int64_t> constants;
  int64_t items = 0;
  int vector_width = 1;
  int block = 256;
  int unroll = 4;
  // Transposing groups use a fixed 3-D grid of 32x32 tiles and 32x8-thread
  // blocks instead (grid[0] > 0 marks them; `block` is then 32 and block_y 8).
  int64_t grid[3] = {0, 1, 1};
  int block_y = 1;
  // GEMM kernels (gemm.cc) are compiled with CUTLASS's headers on the include
  // path, launch with `shared_bytes` of dynamic shared memory, and need every
  // pointer aligned to `align_bytes` (the executor checks before launching).
  bool cutlass = false;
  // Hopper kernels (gemm_sm90.cc) use wgmma: built for sm_90a, run on sm_90 only.
  bool sm90a = false;
  int shared_bytes = 0;
  int align_bytes = 0;

  // The complete CUDA C++ translation unit NVRTC compiles: includes, then source.
  std::string translation_unit() const {
    std::string tu;
    for (const auto& inc : includes) tu += inc + "\n";
    return tu + source;
  }
};

}  // namespace ff::codegen
