// GEMM kernels: which matmuls become one (match_gemm), how the partition and
// the code generator describe them, and the tile cost model. NVRTC compiles of
// the generated CUTLASS code need its headers: tests/python/test_kernels_compile.py.
#include <gtest/gtest.h>

#include "codegen/cuda/gemm.h"
#include "kernel/gemm.h"
#include "gemm_spec.h"
#include "fusion/scheduler.h"
#include "pipeline/compile.h"

namespace ff {
namespace {

const fusion::FusionOptions kAllGemm{{DType::f32, DType::f16, DType::bf16}};

using testing::gemm_spec_of;

TEST(Gemm, LinearIsRowMajorTimesColumnMajorWithBroadcastBias) {
  auto s = gemm_spec_of(R"(graph @g(%x: f32[1024,8192], %w: f32[512,8192] param, %b: f32[512] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[8192,512]{1,8192}
  %1 = addmm(%b, %x, %0) : f32[1024,512]
  return %1
})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->m, 1024);
  EXPECT_EQ(s->n, 512);
  EXPECT_EQ(s->k, 8192);
  EXPECT_TRUE(s->a.row_major);
  EXPECT_EQ(s->a.ld, 8192);
  EXPECT_FALSE(s->b.row_major);  // W.T: the weight's rows are B's columns
  EXPECT_EQ(s->b.ld, 8192);
  EXPECT_EQ(s->source, fusion::GemmSpec::Source::Bias);
  EXPECT_EQ(s->ldc, 0);  // one bias row for every output row
  EXPECT_EQ(s->alignment, 4);
}

TEST(Gemm, BatchedWithBroadcastBatchAndOddSizes) {
  auto s = gemm_spec_of(R"(graph @g(%a: f32[3,7,12], %w: f32[1,12,5]) {
  %0 = expand(%w) : f32[3,12,5]{0,5,1}
  %1 = bmm(%a, %0) : f32[3,7,5]
  return %1
})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->batch, 3);
  EXPECT_EQ(s->a.batch_stride, 84);
  EXPECT_EQ(s->b.batch_stride, 0);
  EXPECT_EQ(s->alignment, 1);  // N = 5
  EXPECT_EQ(s->source, fusion::GemmSpec::Source::None);
}

TEST(Gemm, UnsupportedLayoutsAndDtypesStayLibraryCalls) {
  // Neither dim of A unit-stride.
  EXPECT_FALSE(gemm_spec_of(R"(graph @g(%a: f32[4,16], %b: f32[8,4]) {
  %0 = slice(%a) {dim=1, end=16, start=0, step=2} : f32[4,8]{16,2}
  %1 = mm(%0, %b) : f32[4,4]
  return %1
})"));
  // A per-row bias.
  EXPECT_FALSE(gemm_spec_of(R"(graph @g(%c: f32[4,1], %a: f32[4,8], %b: f32[8,4]) {
  %0 = addmm(%c, %a, %b) : f32[4,4]
  return %0
})"));
  // f64, and f16 with an odd K (2-byte accesses).
  EXPECT_FALSE(gemm_spec_of(R"(graph @g(%a: f64[4,8], %b: f64[8,4]) {
  %0 = mm(%a, %b) : f64[4,4]
  return %0
})"));
  EXPECT_FALSE(gemm_spec_of(R"(graph @g(%a: f16[4,7], %b: f16[7,4]) {
  %0 = mm(%a, %b) : f16[4,4]
  return %0
})"));
  EXPECT_TRUE(gemm_spec_of(R"(graph @g(%a: f16[4,8], %b: f16[8,4]) {
  %0 = mm(%a, %b) : f16[4,4]
  return %0
})"));
}

TEST(Gemm, GroupReadingOnlyTheResultBecomesTheEpilogue) {
  const std::string text = R"(graph @g(%x: f32[64,32], %w: f32[16,32] param, %b: f32[16] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[32,16]{1,32}
  %1 = addmm(%b, %x, %0) : f32[64,16]
  %2 = sigmoid(%1) : f32[64,16]
  %3 = mul(%2, 2.0) : f32[64,16]
  %4 = add(%3, %1) : f32[64,16]
  return %4
})";
  auto g = parse(text);
  verify(*g);
  for (auto& grp : fusion::partition(*g).groups) EXPECT_EQ(grp.kind, fusion::Group::Kind::Pointwise);
  // Only matmuls of the listed dtypes become GEMM groups.
  for (auto& grp : fusion::partition(*g, {{DType::f16, DType::bf16}}).groups)
    EXPECT_EQ(grp.kind, fusion::Group::Kind::Pointwise);
  auto p = fusion::partition(*g, kAllGemm);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].kind, fusion::Group::Kind::Gemm);
  EXPECT_EQ(p.groups[0].nodes.size(), 4u);  // addmm + sigmoid, mul, add
  ASSERT_EQ(p.groups[0].outputs.size(), 1u);
  EXPECT_EQ(p.groups[0].outputs[0]->name, "4");  // the GEMM writes only the epilogue's result

  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  auto cg = compile_graph(text, opts);
  ASSERT_EQ(cg.kernels.size(), 1u);
  const codegen::KernelSource& k = cg.kernels[0];
  EXPECT_EQ(k.name, "ff_gemm_addmm_sigmoid_mul_add_3xtf32_64x64_0");
  EXPECT_TRUE(k.cutlass);
  EXPECT_NE(k.source.find("cutlass::arch::OpMultiplyAddFastF32"), std::string::npos);
  EXPECT_NE(k.source.find("cutlass::layout::ColumnMajor"), std::string::npos);
  EXPECT_NE(k.source.find("ff_sigmoid(v)"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("{const_cast<Element*>(bias), ldc}"), std::string::npos);
  // m, n, k, lda, batch stride (one batch: 0), ldb, batch stride, ldc (0: the bias row broadcast), batch stride, batch
  EXPECT_EQ(k.constants, (std::vector<int64_t>{64, 16, 32, 32, 0, 32, 0, 0, 0, 1}));
  EXPECT_EQ(k.inputs, (std::vector<std::string>{"x", "0", "b"}));
  EXPECT_EQ(k.outputs, (std::vector<std::string>{"4"}));
  EXPECT_EQ(k.grid[0], 1);  // 64x16 fits one 64x64 tile
  EXPECT_EQ(k.shared_bytes, 5 * (64 * 16 + 16 * 64) * 4);  // 64x64x16 tile, 5 stages
  EXPECT_EQ(k.block, 128);                                  // 2x2 warps of 32x32
  EXPECT_EQ(k.align_bytes, 16);
}

TEST(Gemm, KernelsOfOneTemplateShareTheirCodeWhateverTheirShapes) {
  // Attention's q @ k.T in two stages of a windowed transformer: the same
  // 49 x 49 x 32 products, batches of 384 and 96 windows x heads.
  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  const auto cg = compile_graph(R"(graph @g(%a: f32[384,49,32], %b: f32[384,32,49], %c: f32[96,49,32], %d: f32[96,32,49]) {
  %0 = bmm(%a, %b) : f32[384,49,49]
  %1 = bmm(%c, %d) : f32[96,49,49]
  return %0, %1
})",
                                opts);
  ASSERT_EQ(cg.plan.kernels.size(), 2u);
  const plan::Kernel &first = cg.plan.kernels[0], &second = cg.plan.kernels[1];
  EXPECT_EQ(first.compile_key(), second.compile_key());  // one compile for both
  EXPECT_EQ(first.constants, (std::vector<int64_t>{49, 49, 32, 32, 1568, 49, 1568, 49, 2401, 384}));
  EXPECT_EQ(second.constants, (std::vector<int64_t>{49, 49, 32, 32, 1568, 49, 1568, 49, 2401, 96}));
  EXPECT_EQ(second.grid[2], 96);
}

TEST(Gemm, OneMoreTensorOfTheResultsLayoutBecomesTheSource) {
  // mm -> relu -> + residual: the residual is the GEMM's source operand.
  const std::string text = R"(graph @g(%x: f32[64,32], %w: f32[32,16], %r: f32[64,16]) {
  %0 = mm(%x, %w) : f32[64,16]
  %1 = relu(%0) : f32[64,16]
  %2 = add(%1, %r) : f32[64,16]
  return %2
})";
  auto g = parse(text);
  verify(*g);
  auto p = fusion::partition(*g, kAllGemm);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].gemm.source, fusion::GemmSpec::Source::EpilogueInput);
  EXPECT_EQ(p.groups[0].gemm.ldc, 16);
  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  auto cg = compile_graph(text, opts);
  ASSERT_EQ(cg.kernels.size(), 1u);
  EXPECT_EQ(cg.kernels[0].inputs, (std::vector<std::string>{"x", "w", "r"}));
  EXPECT_NE(cg.kernels[0].source.find("apply(alpha_ * acc[i], float(src[i]))"), std::string::npos);
  EXPECT_NE(cg.kernels[0].source.find("(t0 + s)"), std::string::npos) << cg.kernels[0].source;

  // bmm -> + per-column bias: the bias row is broadcast (ldc 0) to every batch.
  auto g2 = parse(R"(graph @g(%a: f32[4,8,32], %b: f32[4,32,16], %bias: f32[16]) {
  %0 = bmm(%a, %b) : f32[4,8,16]
  %1 = add(%0, %bias) : f32[4,8,16]
  return %1
})");
  verify(*g2);
  auto p2 = fusion::partition(*g2, kAllGemm);
  ASSERT_EQ(p2.groups.size(), 1u);
  EXPECT_EQ(p2.groups[0].gemm.ldc, 0);
  EXPECT_EQ(p2.groups[0].gemm.batch_stride_c, 0);
}

TEST(Gemm, EpilogueNeedingMoreThanOneSourceOrTheRawResultStaysSeparate) {
  // addmm's bias already is the source: a residual stays a separate kernel.
  auto g = parse(R"(graph @g(%x: f32[64,32], %w: f32[32,16], %b: f32[16], %r: f32[64,16]) {
  %0 = addmm(%b, %x, %w) : f32[64,16]
  %1 = add(%0, %r) : f32[64,16]
  return %1
})");
  verify(*g);
  EXPECT_EQ(fusion::partition(*g, kAllGemm).groups.size(), 2u);
  // A per-row vector is no source layout.
  auto g1 = parse(R"(graph @g(%x: f32[64,32], %w: f32[32,16], %r: f32[64,1]) {
  %0 = mm(%x, %w) : f32[64,16]
  %1 = mul(%0, %r) : f32[64,16]
  return %1
})");
  verify(*g1);
  EXPECT_EQ(fusion::partition(*g1, kAllGemm).groups.size(), 2u);
  // The result is also returned: it must be written, so nothing is fused into the GEMM.
  auto g2 = parse(R"(graph @g(%x: f32[64,32], %w: f32[32,16]) {
  %0 = mm(%x, %w) : f32[64,16]
  %1 = relu(%0) : f32[64,16]
  return %1, %0
})");
  verify(*g2);
  auto p2 = fusion::partition(*g2, kAllGemm);
  ASSERT_EQ(p2.groups.size(), 2u);
  for (auto& grp : p2.groups)
    if (grp.kind == fusion::Group::Kind::Gemm) EXPECT_EQ(grp.nodes.size(), 1u);
}

TEST(Gemm, HalfPrecisionAccumulatesInF32WithoutSplitting) {
  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  auto cg = compile_graph(R"(graph @g(%a: f16[256,64], %b: f16[64,128]) {
  %0 = mm(%a, %b) : f16[256,128]
  return %0
})", opts);
  ASSERT_EQ(cg.kernels.size(), 1u);
  const auto& k = cg.kernels[0];
  EXPECT_NE(k.source.find("cutlass::half_t"), std::string::npos);
  EXPECT_NE(k.source.find("cutlass::arch::OpMultiplyAdd>"), std::string::npos);
  EXPECT_EQ(k.source.find("FastF32"), std::string::npos);
  EXPECT_NE(k.source.find("GemmShape<16, 8, 16>"), std::string::npos);
}

TEST(Gemm, Tf32PrecisionUsesOneTf32MmaAndItsOwnTiles) {
  const std::string text = R"(graph @g(%a: f32[4096,512], %b: f32[512,4096], %h: f16[256,64], %hb: f16[64,128]) {
  %0 = mm(%a, %b) : f32[4096,4096]
  %1 = mm(%h, %hb) : f16[256,128]
  return %0, %1
})";
  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  opts.precision = Precision::tf32;
  auto cg = compile_graph(text, opts);
  ASSERT_EQ(cg.kernels.size(), 2u);
  const auto& k = cg.kernels[0];
  EXPECT_EQ(k.name, "ff_gemm_mm_tf32_128x128_0");
  EXPECT_EQ(k.source.find("FastF32"), std::string::npos);
  EXPECT_NE(k.source.find("cutlass::arch::OpMultiplyAdd>"), std::string::npos);
  EXPECT_NE(k.source.find("GemmShape<16, 8, 8>"), std::string::npos);  // TF32 MMA shape
  EXPECT_EQ(k.shared_bytes, 4 * (128 * 32 + 32 * 128) * 4);           // 64x64 warp tiles fit without splitting
  EXPECT_EQ(k.block, 128);
  EXPECT_FALSE(cg.partition.groups[1].gemm.tf32);  // only f32 matmuls change math
  EXPECT_EQ(cg.kernels[1].name.find("tf32"), std::string::npos);
  opts.precision = Precision::fp32;
  EXPECT_EQ(compile_graph(text, opts).kernels[0].name, "ff_gemm_mm_3xtf32_128x128_0");
}

TEST(Gemm, VariantsCoverTheOtherCandidateTiles) {
  CompileOptions opts;
  opts.gemm_dtypes = kAllGemm.gemm_dtypes;
  opts.autotune = true;
  auto cg = compile_graph(R"(graph @g(%a: f32[4096,512], %b: f32[512,4096]) {
  %0 = mm(%a, %b) : f32[4096,4096]
  return %0
})", opts);
  ASSERT_EQ(cg.kernel_variants.size(), 1u);
  ASSERT_EQ(cg.kernel_variants[0].size(), 2u);
  EXPECT_EQ(cg.kernels[0].name, "ff_gemm_mm_3xtf32_128x128_0");
  EXPECT_EQ(cg.kernel_variants[0][0].name, "ff_gemm_mm_3xtf32_128x64_0");
  EXPECT_EQ(cg.kernel_variants[0][1].name, "ff_gemm_mm_3xtf32_64x64_0");
  EXPECT_EQ(cg.kernel_variants[0][1].grid[0], 64);
  EXPECT_EQ(cg.kernel_variants[0][0].inputs, cg.kernels[0].inputs);
}

TEST(Gemm, CostModelPrefersBigTilesUnlessTheyLeaveMultiprocessorsIdle) {
  fusion::GemmSpec big;
  big.m = 1024;
  big.n = 8192;
  big.k = 8192;
  const int sms = default_target().sm_count;
  auto area = [&](const fusion::GemmSpec& s) {
    const codegen::GemmTile t = codegen::choose_gemm_tile(s, sms);
    return t.m * t.n;
  };
  EXPECT_EQ(area(big), 128 * 128);
  fusion::GemmSpec small = big;
  small.m = 256;
  small.n = 1000;
  const auto t = codegen::choose_gemm_tile(small, sms);
  EXPECT_EQ(t.m * t.n, 64 * 64);  // 16 big tiles would fill 16 of 132 multiprocessors
  // Attention's q @ k.T: a short sum over many tiles takes the 128x64 tile.
  fusion::GemmSpec qk = big;
  qk.batch = 256;
  qk.m = qk.n = 1024;
  qk.k = 64;
  EXPECT_EQ(area(qk), 128 * 64);
  qk.k = 1024;
  EXPECT_EQ(area(qk), 128 * 128);
  for (DType t : {DType::f32, DType::f16})
    for (bool tf32 : {false, true}) {
      fusion::GemmSpec s;
      s.dtype = t;
      s.tf32 = tf32;
      for (const auto& c : codegen::gemm_tiles(s)) {
        EXPECT_LE(c.shared_bytes(t), 227 * 1024);
      EXPECT_EQ(c.m % c.warp_m + c.n % c.warp_n, 0);
        EXPECT_LE(c.threads(), 256);
      }
    }
}

}  // namespace
}  // namespace ff
