#pragma once
// Generated implicit-GEMM convolution kernels (CUTLASS 2.x conv mainloops,
// compiled with NVRTC like the GEMM kernels) with a fused pointwise epilogue.
#include <vector>

#include "codegen/cuda/gemm.h"
#include "codegen/cuda/kernel_source.h"
#include "kernel/conv.h"
#include "kernel/group.h"

namespace ff::codegen {

// The implicit GEMM of a conv as a GemmSpec (M pixels, N output channels,
// K = channels x window): the GEMM tile cost model and candidates apply.
fusion::GemmSpec conv_as_gemm(const fusion::ConvKernelSpec& spec);

// The candidate tiles of a conv kernel (the GEMM's, but only the smallest for
// loads narrower than 16 bytes), and the cost model's pick among them.
std::vector<GemmTile> conv_tiles(const fusion::ConvKernelSpec& spec);
GemmTile choose_conv_tile(const fusion::ConvKernelSpec& spec, const Target& target);

// The kernel of a Conv group: CUTLASS's forward-conv mainloop (Sm80 mma.sync,
// which Hopper runs; channels-last input and weight; f32 as 3xTF32, or one
// TF32 MMA where the conv's fp32_precision is "tf32"; f16/bf16 accumulate in
// f32) over one tile of output pixels x output channels, whose accumulators
// go to shared memory; then the CTA applies the group's pointwise nodes per
// element (the conv's bias, then the epilogue, each extra input read through
// its own strides) and writes the group's output through its strides, threads
// walking its unit-stride dim, so that any output layout is written coalesced.
// Parameters: the output, the input, the weight, the bias (if the conv has
// one), then each other tensor the epilogue reads. `tile` overrides the cost
// model's choice for `target` (autotuning); the name carries math and tile.
KernelSource generate_conv(const fusion::Group& group, const fusion::ConvKernelSpec& spec, int id, const Target& target,
                           const GemmTile* tile = nullptr);

// The kernels of `group` for the candidate tiles other than the cost model's.
std::vector<KernelSource> conv_variants(const fusion::Group& group, const fusion::ConvKernelSpec& spec, int id,
                                        const Target& target);

}  // namespace ff::codegen
