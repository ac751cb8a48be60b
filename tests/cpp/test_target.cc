// The target GPU's facts: their text form, the per-arch defaults, and that
// kernel choices read them (a GPU with half the SMs gets other launches).
#include <gtest/gtest.h>

#include <string>

#include "ir/target.h"
#include "pipeline/compile.h"

namespace ff {
namespace {

TEST(Target, DefaultIsAnH100ClassPartAndPrintsOneLine) {
  const Target t = default_target();
  EXPECT_EQ(t.name(), "sm90-132sm");
  EXPECT_EQ(t.text(), "sm90-132sm (132 SMs, shared 227 KiB a block, 228 KiB an SM, L2 50 MiB)");
  EXPECT_EQ(t.text().find('\n'), std::string::npos);
  // sm_90 and unknown archs take its facts; other archs their usual part's.
  EXPECT_EQ(target_for_arch(90), t);
  Target unknown = t;
  unknown.arch = 0;
  EXPECT_EQ(target_for_arch(0), unknown);
  EXPECT_EQ(target_for_arch(80).sm_count, 108);
  EXPECT_EQ(target_for_arch(80).shared_per_block_optin, 163 * 1024);
}

TEST(Target, CompileOptionsTakeTheGivenTargetElseTheArchs) {
  CompileOptions o = parse_compile_flags("--arch=90");
  EXPECT_EQ(compile_target(o), default_target());
  Target half = default_target();
  half.sm_count = 66;
  o.target = half;
  EXPECT_EQ(compile_target(o), half);
}

// Launch shapes of every kernel.
std::string launches(const CompiledGraph& cg) {
  std::string out;
  for (const codegen::KernelSource& k : cg.kernels)
    out += k.name + " grid=" + std::to_string(k.grid[0]) + "," + std::to_string(k.grid[1]) + "," +
           std::to_string(k.grid[2]) + " block=" + std::to_string(k.block) + "," + std::to_string(k.block_y) + "\n";
  return out;
}

// A sum over the rows of a wide matrix runs in the columns form, whose
// threads along the reduced dim (threadIdx.y) are as many as keep every SM
// busy: with 66 SMs, half of them.
TEST(Target, ColumnReductionThreadsFollowTheSmCount) {
  const std::string ir = R"(graph @g(%x: f32[512,131072]) {
  %0 = sum(%x) {dims=[0], keepdim=false} : f32[131072]
  return %0
})";
  CompileOptions o = parse_compile_flags("--arch=90");
  const CompiledGraph full = compile_graph(ir, o);
  Target half = default_target();
  half.sm_count = 66;
  o.target = half;
  const CompiledGraph halved = compile_graph(ir, o);
  ASSERT_EQ(full.kernels.size(), 1u) << launches(full);
  ASSERT_EQ(halved.kernels.size(), 1u) << launches(halved);
  EXPECT_EQ(full.kernels[0].block_y, 16) << launches(full);
  EXPECT_EQ(halved.kernels[0].block_y, 8) << launches(halved);
  EXPECT_EQ(halved.kernels[0].grid[0], full.kernels[0].grid[0]);
}

// A TF32 conv whose cuDNN call runs 0.1 ms on contiguous operands and 0.09
// channels-last: channels-last pays the input's copy (26 MB), which costs
// 0.021 ms at the default target's bandwidth and 0.005 at four times it.
TEST(Target, ConvLayoutWeighsConversionsAtTheTargetsBandwidth) {
  const std::string ir = R"(graph @g(%x: f32[16,64,80,80], %w: f32[64,64,3,3] param) {
  %0 = convolution(%x, %w) {cudnn_channels_last_ms=0.09, cudnn_contiguous_ms=0.1, dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[16,64,80,80]
  %1 = relu(%0) : f32[16,64,80,80]
  return %1
})";
  CompileOptions o = parse_compile_flags("--arch=90");
  o.passes = {"conv_engine", "dce"};
  const std::string contiguous = compile_graph(ir, o).ir_after;
  Target fast = default_target();
  fast.rates.dram_bytes_per_s *= 4;
  EXPECT_NE(fast, default_target());
  o.target = fast;
  const std::string channels_last = compile_graph(ir, o).ir_after;
  EXPECT_NE(contiguous.find("= convolution(%x, %w)"), std::string::npos) << contiguous;
  EXPECT_NE(channels_last.find("%1 = copy(%x) : f32[16,64,80,80]{409600,1,5120,64}"), std::string::npos)
      << channels_last;
  EXPECT_NE(channels_last.find("= convolution(%1, %0)"), std::string::npos) << channels_last;
}

}  // namespace
}  // namespace ff
