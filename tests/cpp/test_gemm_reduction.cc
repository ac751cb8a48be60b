// Reductions of a GEMM's epilogue: the split_gemm_reduction pass (its text
// cases are golden files, tests/golden/passes/split_gemm_reduction/), which
// GEMM group takes the blocks in, and the kernels that write the partials.
#include <gtest/gtest.h>

#include "codegen/cuda/gemm.h"
#include "gemm_spec.h"
#include "interp/interpreter.h"
#include "passes/pass.h"
#include "pipeline/compile.h"
#include "runtime/compiler.h"

namespace ff {
namespace {

// linear -> swish -> sum over the features, at K = 1024 (Hopper kernel sizes),
// with tiles enough (16 x 3) that split_gemm_k keeps K whole.
const char* kSwishSum = R"(graph @g(%x: f32[2048,1024], %w: f32[320,1024] param, %b: f32[320] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,320]{1,1024}
  %1 = addmm(%b, %x, %0) : f32[2048,320]
  %2 = sigmoid(%1) : f32[2048,320]
  %3 = mul(%1, %2) : f32[2048,320]
  %4 = sum(%3) {dims=[1], keepdim=false} : f32[2048]
  return %4
})";

std::string split(const std::string& text) {
  auto g = parse(text);
  verify(*g);
  passes::PassManager({"split_gemm_reduction"}).run(*g);
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

TEST(GemmReduction, SplitOnlyWhereF32MatmulsBecomeGemmKernels) {
  // The golden cases run the pass alone; the pipeline runs it only where f32
  // matmuls become GEMM kernels (elsewhere the split would only add work).
  for (const std::vector<DType>& dtypes : {std::vector<DType>{}, std::vector<DType>{DType::f16}}) {
    CompileOptions opts;
    opts.gemm_dtypes = dtypes;
    EXPECT_EQ(compile_graph(kSwishSum, opts).ir_after.find("view"), std::string::npos);
  }
  const std::string split_ir = testing::compile_for(kSwishSum, 90).ir_after;
  EXPECT_EQ(split_ir, split(kSwishSum));
  EXPECT_NE(split_ir.find("= view(%3) : f32[2048,5,64]"), std::string::npos) << split_ir;
  expect_same_meaning(kSwishSum, split_ir);
}

using testing::compile_for;

// The kernels of `cg` of one kind.
std::vector<const codegen::KernelSource*> kernels_of(const CompiledGraph& cg, fusion::Group::Kind kind) {
  std::vector<const codegen::KernelSource*> out;
  for (size_t i = 0; i < cg.kernels.size(); ++i)
    if (cg.partition.groups[i].kind == kind) out.push_back(&cg.kernels[i]);
  return out;
}

TEST(GemmReduction, HopperKernelWritesOnlyTheBlockPartials) {
  const CompiledGraph cg = compile_for(kSwishSum, 90);
  ASSERT_EQ(cg.kernels.size(), 2u);
  const fusion::Group& group = cg.partition.groups[0];
  ASSERT_EQ(group.kind, fusion::Group::Kind::Gemm);
  EXPECT_EQ(group.nodes.size(), 5u);  // addmm, sigmoid, mul, view, block sum
  EXPECT_EQ(group.gemm.reduce, fusion::GemmSpec::Reduce::Sum);
  EXPECT_TRUE(group.gemm.reduce_rows);
  EXPECT_EQ(group.gemm.reduce_block, 64);
  ASSERT_EQ(group.outputs.size(), 1u);
  EXPECT_EQ(group.outputs[0]->type.shape, (Shape{2048, 5}));
  const codegen::KernelSource& k = cg.kernels[0];
  EXPECT_TRUE(k.sm90a);
  EXPECT_EQ(k.name, "ff_gemm_addmm_sigmoid_mul_sum_3xtf32_sm90_0");
  EXPECT_NE(k.source.find("ff_sm90::reduce_rows<64>(acc, f, M, N, *this, 1.0f, out)"),
            std::string::npos)
      << k.source;
  // The partials' last sum is a reduction kernel over the 2048 x 5 partials.
  const fusion::Group& last = cg.partition.groups[1];
  ASSERT_EQ(last.kind, fusion::Group::Kind::Reduction);
  ASSERT_EQ(last.nodes.size(), 1u);
  EXPECT_EQ(last.nodes[0]->op, Op::Sum);
  EXPECT_EQ(last.inputs, std::vector<Value*>{group.outputs[0]});
  const runtime::CompiledKernel bin = runtime::compile_kernel(k.source, k.name, 90, {}, /*sm90a=*/true);
  EXPECT_TRUE(bin.is_cubin);
}

TEST(GemmReduction, ColumnMaxAndMeanKernels) {
  // 34 tiles each: split_gemm_k keeps K whole.
  const std::string text = R"(graph @g(%x: f32[4352,1024], %w: f32[96,1024], %v: f32[4352,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,96]{1,1024}
  %1 = mm(%x, %0) : f32[4352,96]
  %2 = amax(%1) {dims=[0], keepdim=false} : f32[96]
  %3 = mm(%v, %0) : f32[4352,96]
  %4 = tanh(%3) : f32[4352,96]
  %5 = mean(%4) {dims=[1], keepdim=false} : f32[4352]
  return %2, %5
})";
  const CompiledGraph cg = compile_for(text, 90);
  const auto gemms = kernels_of(cg, fusion::Group::Kind::Gemm);
  ASSERT_EQ(gemms.size(), 2u);
  EXPECT_EQ(kernels_of(cg, fusion::Group::Kind::Reduction).size(), 2u);  // the partials' reductions
  std::string sources = gemms[0]->source + gemms[1]->source;
  EXPECT_NE(sources.find("ff_sm90::reduce_cols<64>(acc, f, M, N, *this, 1.0f, out)"), std::string::npos);
  EXPECT_NE(sources.find("static float combine(float a, float b) { return ff_maximum(a, b); }"), std::string::npos);
  EXPECT_NE(sources.find("static float identity() { return __uint_as_float(0xff800000u); }"), std::string::npos);
  EXPECT_NE(sources.find("ff_sm90::reduce_rows<32>(acc, f, M, N, *this, 0.03125f, out)"), std::string::npos);
  for (const codegen::KernelSource* k : gemms)
    EXPECT_TRUE(runtime::compile_kernel(k->source, k->name, 90, {}, true).is_cubin) << k->name;
  // Other GPUs' CUTLASS kernels reduce as well: the tile goes through shared
  // memory (test_kernels_compile.py builds them with CUTLASS's headers).
  const CompiledGraph sm80 = compile_for(text, 80);
  EXPECT_EQ(sm80.ir_after, cg.ir_after);
  const auto sm80_gemms = kernels_of(sm80, fusion::Group::Kind::Gemm);
  ASSERT_EQ(sm80_gemms.size(), 2u);
  for (const codegen::KernelSource* k : sm80_gemms) {
    EXPECT_TRUE(k->cutlass);
    EXPECT_NE(k->source.find("EpilogueWithVisitorFromExistingEpilogue<\n    TileVisitor"), std::string::npos);
  }
  EXPECT_NE(sm80_gemms[0]->source.find("fold(shared.epilogue.tile + blk * BLOCK * TILE_LD + c, TILE_LD)"),
            std::string::npos);
  EXPECT_NE(sm80_gemms[1]->source.find("fold(shared.epilogue.tile + r * TILE_LD + blk * BLOCK, 1)"), std::string::npos);
  EXPECT_NE(sm80_gemms[1]->source.find("partials[row * (N / BLOCK) + col_block] = v * 0.03125f;"), std::string::npos);
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
  ASSERT_EQ(cg.partition.groups.size(), 2u);  // the GEMM and the partials' reduction
  ASSERT_EQ(cg.partition.groups[0].kind, fusion::Group::Kind::Gemm);
  const fusion::GemmSpec& spec = cg.partition.groups[0].gemm;
  ASSERT_EQ(spec.reduce, fusion::GemmSpec::Reduce::Sum);
  const codegen::GemmTile t = codegen::choose_gemm_tile(spec, default_target().sm_count);
  EXPECT_TRUE(t.m == 64 && t.n == 64);
  fusion::GemmSpec whole = spec;
  whole.reduce = fusion::GemmSpec::Reduce::None;
  const codegen::GemmTile w = codegen::choose_gemm_tile(whole, default_target().sm_count);
  EXPECT_TRUE(w.m == 128 && w.n == 128);
}

}  // namespace
}  // namespace ff
