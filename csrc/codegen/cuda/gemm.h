#pragma once
#include <string>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "ir/target.h"
#include "kernel/gemm.h"
#include "kernel/group.h"

namespace ff::codegen {

// A CUTLASS threadblock configuration: tile M x N x K, warp tile, pipeline stages.
struct GemmTile {
  int m, n, k, warp_m, warp_n, stages;
  int threads() const { return (m / warp_m) * (n / warp_n) * 32; }
  int shared_bytes(DType t) const;  // the mainloop's multistage buffers
};

// The candidate tiles for a GEMM's dtype and math (3xTF32 or not), largest first.
std::vector<GemmTile> gemm_tiles(const fusion::GemmSpec& spec);

// The candidate the cost model picks for `spec` on a GPU with `sm_count`
// multiprocessors: the least work on the busiest multiprocessor (tiles per
// multiprocessor times tile area), weighted by each tile's relative efficiency
// (big tiles reuse more of what they load, unless the sum is short). With a
// block reduction, among the tiles whose value tile fits in the mainloop's
// shared memory where any does.
GemmTile choose_gemm_tile(const fusion::GemmSpec& spec, int sm_count);

// A CUTLASS 2.x batched GEMM (Sm80 mma.sync, which Hopper runs) for the
// matmul node that starts `group`: f32 operands use 3xTF32 (each operand split
// into a TF32 high part and residual, three MMAs: fp32 accuracy on tensor
// cores) or, with spec.tf32, one TF32 MMA; f16/bf16 accumulate in f32. The
// epilogue computes alpha * acc (+ beta * bias for addmm), rounds it to the
// dtype, applies the group's pointwise nodes per element (reading the source
// tensor's element where the spec says so) and writes only the group's output
// (with GemmSpec::reduce, the block partials: gemm_sm80_reduce.h).
// Parameters: the output, A, B, addmm's bias (read unless beta = 0), the
// epilogue's source tensor. `id` makes the kernel name unique. The cost
// model picks the tile for `target`; `tile` overrides its choice (autotuning
// compiles each candidate); the kernel's name carries its tile.
KernelSource generate_gemm(const fusion::Group& group, const fusion::GemmSpec& spec, int id, const Target& target,
                           const GemmTile* tile = nullptr);

// Fills `ks`'s name (the matmul, its fused ops, `tag` for math and tile, `id`)
// and parameters: the output, A, B, addmm's bias, the epilogue's source
// tensor. Returns that source tensor (Source::EpilogueInput) or nullptr.
const Value* gemm_signature(KernelSource& ks, const fusion::Group& group, const fusion::GemmSpec& spec,
                            const std::string& tag, int id);

// The group's pointwise nodes after the matmul (not a block reduction's view and op).
std::vector<Node*> gemm_pointwise_nodes(const fusion::Group& group, const fusion::GemmSpec& spec);

// A struct member `static float apply(float v, float s)`: the GEMM's value v
// rounded to its dtype, then the group's fused pointwise nodes (s: the
// source tensor's element); it returns the group's output, or with a block
// reduction the value reduced.
std::string gemm_epilogue_apply(const fusion::Group& group, const fusion::GemmSpec& spec, const Value* source_input);

// A struct member `float value(int row, int col, float acc) const`: the
// epilogue of the accumulator at (row, col) through `apply` (as
// gemm_epilogue_apply's), reading member `src` (addmm's bias or the source
// tensor, this batch's) where the spec has a source.
std::string gemm_epilogue_value(const fusion::GemmSpec& spec, const std::string& apply);

// Struct members `static float identity()` and `static float combine(float,
// float)` of the spec's block reduction (sum, mean, amax, amin).
std::string gemm_reduction_members(const fusion::GemmSpec& spec);
// The factor a block's fold is scaled by: 1 / block for a mean, else 1.
std::string gemm_reduction_scale(const fusion::GemmSpec& spec);

// `v` as a CUDA float literal ("0.5f", "2.0f").
std::string f32_literal(double v);

// The kernels of `group` for the candidate tiles other than the cost model's.
std::vector<KernelSource> gemm_variants(const fusion::Group& group, const fusion::GemmSpec& spec, int id,
                                        const Target& target);

}  // namespace ff::codegen
