#pragma once
// The sm80 CUTLASS GEMM kernel's form with a block reduction in its epilogue
// (GemmSpec::reduce): CUTLASS's mainloop, then its epilogue with a visitor
// that writes each value into the CTA's tile in shared memory, then the
// tile's blocks folded pairwise, in a fixed order, into the partials.
#include <string>

#include "codegen/cuda/gemm.h"

namespace ff::codegen {

// Shared memory the kernel needs: the mainloop's stages, or (after them, in
// the same bytes) the epilogue's accumulator exchange and the value tile.
int sm80_reduce_shared_bytes(const GemmTile& tile);

// Shared with the conv kernels (conv.cc), which stage their tile the same
// way: a TileVisitor's hooks that do nothing (its constructor, `visit` and
// `end_step` are each kernel's own), and the shared storage that puts the
// epilogue's exchange and the BM x TILE_LD value tile where the mainloop's
// stages were, with the namespace's end.
std::string tile_visitor_noop_hooks();
std::string tile_shared_storage(int shared_bytes);

// The text after gemm.cc's `using Default = DefaultGemm<...>;` (inside its
// anonymous namespace, `EpilogueOp::apply` and `Element` defined): the
// visitor, the shared storage, the namespace's end and the kernel `ks.name`,
// with parameters as generate_gemm's.
std::string sm80_reduce_kernel(const KernelSource& ks, const fusion::GemmSpec& spec, const GemmTile& tile, bool addmm,
                               bool has_source);

}  // namespace ff::codegen
