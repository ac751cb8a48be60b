// Reductions of a GEMM's epilogue (split_gemm_reduction.h): the rewrite into
// block partials and a reduction of them, which GEMM group takes the blocks
// in, and the kernels that write the partials.
#include <gtest/gtest.h>

#include "codegen/cuda/gemm.h"
#include "fusion/split_gemm_reduction.h"
#include "gemm_spec.h"
#include "interp/interpreter.h"
#include "pipeline/compile.h"
#include "runtime/compiler.h"

namespace ff {
namespace {

// linear -> swish -> sum over the features, at K = 1024 (Hopper kernel sizes).
const char* kSwishSum = R"(graph @g(%x: f32[200,1024], %w: f32[320,1024] param, %b: f32[320] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,320]{1,1024}
  %1 = addmm(%b, %x, %0) : f32[200,320]
  %2 = sigmoid(%1) : f32[200,320]
  %3 = mul(%1, %2) : f32[200,320]
  %4 = sum(%3) {dims=[1], keepdim=false} : f32[200]
  return %4
})";

std::string split(const std::string& text, const std::vector<DType>& gemm_dtypes = {DType::f32}) {
  auto g = parse(text);
  verify(*g);
  fusion::split_gemm_reductions(*g, gemm_dtypes);
  verify(*g);
  return print(*g);
}

void expect_same_meaning(const std::string& before, const std::string& after) {
  auto a = parse(before), b = parse(after);
  for (uint64_t seed : {1, 2}) {
    const auto inputs = interp::random_inputs(*a, seed);
    const auto want = interp::run(*a, inputs), got = interp::run(*b, inputs);
    ASSERT_EQ(want.size(), got.size());
    // Each node rounds to f32, so the partials change the rounding.
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(interp::allclose(got[i], want[i], 1e-5, 1e-5)) << after;
  }
}

TEST(GemmReduction, SplitsARowSumIntoBlocksOfTheLargestDividingSize) {
  // N = 320 = 5 * 64: blocks of 64, the largest (every GEMM tile side is a multiple of it).
  const std::string after = split(kSwishSum);
  EXPECT_EQ(after, R"(graph @g(%x: f32[200,1024], %w: f32[320,1024] param, %b: f32[320] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,320]{1,1024}
  %1 = addmm(%b, %x, %0) : f32[200,320]
  %2 = sigmoid(%1) : f32[200,320]
  %3 = mul(%1, %2) : f32[200,320]
  %4 = view(%3) : f32[200,5,64]
  %5 = sum(%4) {dims=[2], keepdim=false} : f32[200,5]
  %6 = sum(%5) {dims=[1], keepdim=false} : f32[200]
  return %6
}
)");
  expect_same_meaning(kSwishSum, after);
}

TEST(GemmReduction, SplitsColumnReductionsMeansAndBatches) {
  // amax over the rows (M = 192: blocks of 64), a keepdim mean over a bmm's
  // columns (N = 96: blocks of 32).
  const std::string cols = R"(graph @g(%x: f32[192,1024], %w: f32[320,1024] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,320]{1,1024}
  %1 = mm(%x, %0) : f32[192,320]
  %2 = amax(%1) {dims=[0], keepdim=true} : f32[1,320]
  return %2
})";
  const std::string after = split(cols);
  EXPECT_NE(after.find("%2 = view(%1) : f32[3,64,320]"), std::string::npos) << after;
  EXPECT_NE(after.find("%3 = amax(%2) {dims=[1], keepdim=false} : f32[3,320]"), std::string::npos) << after;
  EXPECT_NE(after.find("%4 = amax(%3) {dims=[0], keepdim=true} : f32[1,320]"), std::string::npos) << after;
  expect_same_meaning(cols, after);
  const std::string bmm = R"(graph @g(%q: f32[3,64,1024], %k: f32[3,96,1024]) {
  %0 = permute(%k) {dims=[0, 2, 1]} : f32[3,1024,96]{98304,1,1024}
  %1 = bmm(%q, %0) : f32[3,64,96]
  %2 = mean(%1) {dims=[-1], keepdim=true} : f32[3,64,1]
  return %2
})";
  const std::string bmm_after = split(bmm);
  EXPECT_NE(bmm_after.find("view(%1) : f32[3,64,3,32]"), std::string::npos) << bmm_after;
  expect_same_meaning(bmm, bmm_after);
}

TEST(GemmReduction, LeavesReductionsItCannotSplit) {
  const std::string kept[] = {
      // The full product is needed too.
      R"(graph @g(%x: f32[64,1024], %w: f32[64,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,64]{1,1024}
  %1 = mm(%x, %0) : f32[64,64]
  %2 = sum(%1) {dims=[1], keepdim=false} : f32[64]
  return %1, %2
})",
      // Over the batch dim, and over two dims.
      R"(graph @g(%q: f32[3,64,1024], %k: f32[3,64,1024]) {
  %0 = permute(%k) {dims=[0, 2, 1]} : f32[3,1024,64]{65536,1,1024}
  %1 = bmm(%q, %0) : f32[3,64,64]
  %2 = relu(%1) : f32[3,64,64]
  %3 = sum(%2) {dims=[0], keepdim=false} : f32[64,64]
  %4 = bmm(%q, %0) : f32[3,64,64]
  %5 = sum(%4) {dims=[1, 2], keepdim=false} : f32[3]
  return %3, %5
})",
      // No block of 16 or more divides N = 40; a reduction between (softmax).
      R"(graph @g(%x: f32[64,1024], %w: f32[40,1024], %v: f32[64,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,40]{1,1024}
  %1 = mm(%x, %0) : f32[64,40]
  %2 = sum(%1) {dims=[1], keepdim=false} : f32[64]
  %3 = permute(%v) {dims=[1, 0]} : f32[1024,64]{1,1024}
  %4 = mm(%x, %3) : f32[64,64]
  %5 = softmax(%4) {dim=1} : f32[64,64]
  %6 = sum(%5) {dims=[1], keepdim=false} : f32[64]
  return %2, %6
})",
      // An f16 matmul cast to f32: its group would not take the blocks in.
      R"(graph @g(%x: f16[64,1024], %w: f16[64,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f16[1024,64]{1,1024}
  %1 = mm(%x, %0) : f16[64,64]
  %2 = cast(%1) : f32[64,64]
  %3 = sum(%2) {dims=[1], keepdim=false} : f32[64]
  return %3
})",
      // The epilogue reads a residual besides the bias: it stays a kernel of its own.
      R"(graph @g(%x: f32[64,1024], %w: f32[64,1024], %b: f32[64], %r: f32[64,64]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,64]{1,1024}
  %1 = addmm(%b, %x, %0) : f32[64,64]
  %2 = add(%1, %r) : f32[64,64]
  %3 = sum(%2) {dims=[1], keepdim=false} : f32[64]
  return %3
})",
  };
  for (const std::string& text : kept) EXPECT_EQ(split(text), print(*parse(text)));
  // Nor where f32 matmuls stay library calls.
  EXPECT_EQ(split(kSwishSum, {}), print(*parse(kSwishSum)));
  EXPECT_EQ(split(kSwishSum, {DType::f16}), print(*parse(kSwishSum)));
}

using testing::compile_for;

TEST(GemmReduction, HopperKernelWritesOnlyTheBlockPartials) {
  const CompiledGraph cg = compile_for(kSwishSum, 90);
  ASSERT_EQ(cg.kernels.size(), 1u);
  const fusion::PointwiseGroup& group = cg.partition.groups[0];
  EXPECT_EQ(group.nodes.size(), 5u);  // addmm, sigmoid, mul, view, block sum
  EXPECT_EQ(group.gemm.reduce, fusion::GemmSpec::Reduce::Sum);
  EXPECT_TRUE(group.gemm.reduce_rows);
  EXPECT_EQ(group.gemm.reduce_block, 64);
  ASSERT_EQ(group.outputs.size(), 1u);
  EXPECT_EQ(group.outputs[0]->type.shape, (Shape{200, 5}));
  const codegen::KernelSource& k = cg.kernels[0];
  EXPECT_TRUE(k.sm90a);
  EXPECT_EQ(k.name, "ff_gemm_addmm_sigmoid_mul_sum_3xtf32_sm90_0");
  EXPECT_NE(k.source.find("ff_sm90::reduce_rows<64>(acc, f, M, N, *this, 1.0f, out)"),
            std::string::npos)
      << k.source;
  // The partials' last sum runs as a library call on the 200 x 5 partials.
  int library_sums = 0;
  for (const fusion::Step& s : cg.partition.steps)
    if (s.kind == fusion::Step::Kind::Node && s.node->op == Op::Sum) {
      ++library_sums;
      EXPECT_EQ(s.node->input(0), group.outputs[0]);
    }
  EXPECT_EQ(library_sums, 1);
  const runtime::CompiledKernel bin = runtime::compile_kernel(k.source, k.name, 90, {}, /*sm90a=*/true);
  EXPECT_TRUE(bin.is_cubin);
}

TEST(GemmReduction, ColumnMaxAndMeanKernels) {
  const std::string text = R"(graph @g(%x: f32[256,1024], %w: f32[96,1024], %v: f32[256,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,96]{1,1024}
  %1 = mm(%x, %0) : f32[256,96]
  %2 = amax(%1) {dims=[0], keepdim=false} : f32[96]
  %3 = mm(%v, %0) : f32[256,96]
  %4 = tanh(%3) : f32[256,96]
  %5 = mean(%4) {dims=[1], keepdim=false} : f32[256]
  return %2, %5
})";
  const CompiledGraph cg = compile_for(text, 90);
  ASSERT_EQ(cg.kernels.size(), 2u);
  std::string sources = cg.kernels[0].source + cg.kernels[1].source;
  EXPECT_NE(sources.find("ff_sm90::reduce_cols<64>(acc, f, M, N, *this, 1.0f, out)"), std::string::npos);
  EXPECT_NE(sources.find("static float combine(float a, float b) { return ff_maximum(a, b); }"), std::string::npos);
  EXPECT_NE(sources.find("static float identity() { return __uint_as_float(0xff800000u); }"), std::string::npos);
  EXPECT_NE(sources.find("ff_sm90::reduce_rows<32>(acc, f, M, N, *this, 0.03125f, out)"), std::string::npos);
  for (const codegen::KernelSource& k : cg.kernels)
    EXPECT_TRUE(runtime::compile_kernel(k.source, k.name, 90, {}, true).is_cubin) << k.name;
  // Other GPUs' CUTLASS kernels reduce as well: the tile goes through shared
  // memory (test_kernels_compile.py builds them with CUTLASS's headers).
  const CompiledGraph sm80 = compile_for(text, 80);
  EXPECT_EQ(sm80.ir_after, cg.ir_after);
  ASSERT_EQ(sm80.kernels.size(), 2u);
  for (const codegen::KernelSource& k : sm80.kernels) {
    EXPECT_TRUE(k.cutlass);
    EXPECT_NE(k.source.find("EpilogueWithVisitorFromExistingEpilogue<\n    TileVisitor"), std::string::npos);
  }
  EXPECT_NE(sm80.kernels[0].source.find("fold(shared.epilogue.tile + blk * BLOCK * TILE_LD + c, TILE_LD)"),
            std::string::npos);
  EXPECT_NE(sm80.kernels[1].source.find("fold(shared.epilogue.tile + r * TILE_LD + blk * BLOCK, 1)"), std::string::npos);
  EXPECT_NE(sm80.kernels[1].source.find("partials[row * (N / BLOCK) + col_block] = v * 0.03125f;"), std::string::npos);
}

TEST(GemmReduction, CostModelKeepsTheValueTileWithinTheMainloopsSharedMemory) {
  // 3xTF32 kernels with a reduction keep to the tile whose value tile fits
  // in the mainloop's shared memory (64x64; 128x128 would need 100 KiB).
  const std::string text = R"(graph @g(%x: f32[8192,512], %w: f32[4096,512]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[512,4096]{1,512}
  %1 = mm(%x, %0) : f32[8192,4096]
  %2 = relu(%1) : f32[8192,4096]
  %3 = sum(%2) {dims=[1], keepdim=false} : f32[8192]
  return %3
})";
  const CompiledGraph cg = compile_for(text, 80);
  ASSERT_EQ(cg.partition.groups.size(), 1u);
  const fusion::GemmSpec& spec = cg.partition.groups[0].gemm;
  ASSERT_EQ(spec.reduce, fusion::GemmSpec::Reduce::Sum);
  const codegen::GemmTile t = codegen::choose_gemm_tile(spec);
  EXPECT_TRUE(t.m == 64 && t.n == 64);
  fusion::GemmSpec whole = spec;
  whole.reduce = fusion::GemmSpec::Reduce::None;
  const codegen::GemmTile w = codegen::choose_gemm_tile(whole);
  EXPECT_TRUE(w.m == 128 && w.n == 128);
}

}  // namespace
}  // namespace ff
