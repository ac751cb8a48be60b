// Hopper GEMM kernels (gemm_sm90.cc): which matmuls get one when the target
// is sm_90, what the generated code holds, and that NVRTC builds it for the
// arch-specific sm_90a target (no GPU needed; no CUTLASS headers either).
#include <gtest/gtest.h>

#include "codegen/cuda/gemm_sm90.h"
#include "kernel/gemm.h"
#include "gemm_spec.h"
#include "pipeline/compile.h"
#include "runtime/check.h"
#include "runtime/compiler.h"

namespace ff {
namespace {

// y = x @ W.T + b, then y + 2 * sigmoid(y): the gemm_sigmoid pattern at a
// ragged size (M, N not multiples of the 128 x 128 tile, K of its 32).
const char* kLinear = R"(graph @g(%x: f32[1410,1028], %w: f32[300,1028] param, %b: f32[300] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1028,300]{1,1028}
  %1 = addmm(%b, %x, %0) : f32[1410,300]
  %2 = sigmoid(%1) : f32[1410,300]
  %3 = mul(%2, 2.0) : f32[1410,300]
  %4 = add(%3, %1) : f32[1410,300]
  return %4
})";

using testing::compile_for;

TEST(GemmSm90, HopperTargetGetsTheWgmmaKernelWithTheEpilogueFused) {
  const CompiledGraph cg = compile_for(kLinear, 90);
  ASSERT_EQ(cg.kernels.size(), 1u);
  const codegen::KernelSource& k = cg.kernels[0];
  EXPECT_EQ(k.name, "ff_gemm_addmm_sigmoid_mul_add_3xtf32_sm90_0");
  EXPECT_TRUE(k.sm90a);
  EXPECT_FALSE(k.cutlass);
  EXPECT_NE(k.source.find("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"), std::string::npos);
  EXPECT_NE(k.source.find("ff_sigmoid(v)"), std::string::npos);
  // addmm's bias is one row broadcast to every output row (row stride 0).
  EXPECT_NE(k.source.find("src[static_cast<long long>(row) * 0 + col]"), std::string::npos) << k.source;
  // Sizes reach the mainloop as warp-uniform run-time values: constants make
  // ptxas serialize the wgmmas, per-thread values (asm mov) slow the loop.
  EXPECT_NE(k.source.find("M + opaque, N + opaque, 1028 + opaque, 1028 + opaque, 1028 + opaque"), std::string::npos)
      << k.source;
  EXPECT_EQ(k.source.find("asm volatile(\"mov"), std::string::npos);
  EXPECT_EQ(k.inputs, (std::vector<std::string>{"x", "0", "b"}));
  EXPECT_EQ(k.grid[0], 12 * 3);  // a CTA per tile: ceil(1410 / 128) x ceil(300 / 128)
  EXPECT_EQ(k.grid[1], 1);
  EXPECT_EQ(k.block, 384);
  EXPECT_EQ(k.align_bytes, 16);
  EXPECT_GT(k.shared_bytes, 48 * 1024);
  // Other targets keep the sm80 CUTLASS kernel.
  for (int arch : {0, 80, 89, 100}) {
    const CompiledGraph other = compile_for(kLinear, arch);
    EXPECT_FALSE(other.kernels[0].sm90a) << arch;
    EXPECT_TRUE(other.kernels[0].cutlass) << arch;
  }
}

TEST(GemmSm90, CoversKContiguousF32OperandsWithLongSumsOnly) {
  auto spec = [](const std::string& text) { return testing::gemm_spec_of(text).value(); };
  fusion::GemmSpec linear = spec(kLinear);
  EXPECT_TRUE(codegen::sm90_gemm_applies(linear));
  fusion::GemmSpec tf32 = linear;
  tf32.tf32 = true;  // plain TF32 keeps its own kernel
  EXPECT_FALSE(codegen::sm90_gemm_applies(tf32));
  // x @ W with W row-major: B is N-contiguous, which tf32 wgmma cannot read.
  EXPECT_FALSE(codegen::sm90_gemm_applies(spec(R"(graph @g(%x: f32[256,1024], %w: f32[1024,512]) {
  %0 = mm(%x, %w) : f32[256,512]
  return %0
})")));
  // K = 1000: short sums keep the sm80 kernel (its split rounds both parts).
  EXPECT_FALSE(codegen::sm90_gemm_applies(spec(R"(graph @g(%x: f32[256,1000], %w: f32[512,1000]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1000,512]{1,1000}
  %1 = mm(%x, %0) : f32[256,512]
  return %1
})")));
  // K = 1026: rows not 16-byte aligned.
  EXPECT_FALSE(codegen::sm90_gemm_applies(spec(R"(graph @g(%x: f32[64,1026], %w: f32[64,1026]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1026,64]{1,1026}
  %1 = mm(%x, %0) : f32[64,64]
  return %1
})")));
  // Batched q @ k.T with a broadcast batch of k: covered (per-batch strides).
  const fusion::GemmSpec qk = spec(R"(graph @g(%q: f32[4,100,1024], %k: f32[1,96,1024]) {
  %0 = permute(%k) {dims=[0, 2, 1]} : f32[1,1024,96]{98304,1,1024}
  %1 = expand(%0) : f32[4,1024,96]{0,1,1024}
  %2 = bmm(%q, %1) : f32[4,100,96]
  return %2
})");
  EXPECT_TRUE(codegen::sm90_gemm_applies(qk));
  EXPECT_EQ(qk.b.batch_stride, 0);
  // An odd N does not matter: results are stored element by element.
  EXPECT_TRUE(codegen::sm90_gemm_applies(spec(R"(graph @g(%x: f32[64,1024], %w: f32[77,1024]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[1024,77]{1,1024}
  %1 = mm(%x, %0) : f32[64,77]
  return %1
})")));
}

TEST(GemmSm90, CompilesForSm90aOnlyAndNeverForOtherTargets) {
  const codegen::KernelSource k = compile_for(kLinear, 90).kernels[0];
  const runtime::CompiledKernel bin = runtime::compile_kernel(k.source, k.name, 90, {}, /*sm90a=*/true);
  EXPECT_TRUE(bin.is_cubin);
  EXPECT_FALSE(bin.image.empty());
  EXPECT_EQ(runtime::plan_compile(90, {}, true).options.front(), "-arch=sm_90a");
  EXPECT_THROW(runtime::plan_compile(80, {}, true), runtime::CudaError);
  EXPECT_THROW(runtime::plan_compile(100, {}, true), runtime::CudaError);
}

}  // namespace
}  // namespace ff
