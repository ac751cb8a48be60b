// Fusion decisions and the pointwise code generator: which nodes share a
// kernel, what the generated CUDA looks like, and that NVRTC compiles it.
#include <gtest/gtest.h>

#include "codegen/cuda/pointwise.h"
#include "fusion/scheduler.h"
#include "fusion/subgraph.h"
#include "interp/interpreter.h"
#include "pipeline/compile.h"
#include "runtime/compiler.h"

namespace ff {
namespace {

std::vector<std::string> kinds(const fusion::Partition& p) {
  std::vector<std::string> out;
  for (auto& s : p.steps)
    out.push_back(s.kind == fusion::Step::Kind::Kernel ? "kernel" : std::string(op_name(s.node->op)));
  return out;
}

TEST(Fusion, EpilogueAfterLibraryOpIsOneKernel) {
  auto g = parse(R"(graph @g(%x: f32[8,4,10,10], %w: f32[16,4,3,3] param, %bias: f32[16,1,1] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f32[8,16,8,8]
  %1 = minimum(%0, 0.5) : f32[8,16,8,8]
  %2 = add(%1, %bias) : f32[8,16,8,8]
  %3 = mul(%2, 2.0) : f32[8,16,8,8]
  return %3
})");
  verify(*g);
  auto p = fusion::partition(*g);
  EXPECT_EQ(kinds(p), (std::vector<std::string>{"convolution", "kernel"}));
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].nodes.size(), 3u);
  EXPECT_EQ(p.groups[0].inputs.size(), 2u);  // conv result and bias
  EXPECT_EQ(p.groups[0].outputs.size(), 1u);
}

// The pointwise scheduler's rules around library reductions (reduction
// kernels off; tests/golden/fusion/ covers the reduction scheduler).
fusion::FusionOptions library_reductions() {
  fusion::FusionOptions o;
  o.reductions = false;
  return o;
}

TEST(Fusion, SmallerProducersAreRecomputedOnlyWhenPrivate) {
  // rsqrt(mean + eps) feeds only the row-wise multiply: it joins that kernel.
  auto g = parse(R"(graph @rms(%x: f32[4,8], %w: f32[8] param) {
  %0 = mul(%x, %x) : f32[4,8]
  %1 = mean(%0) {dims=[-1], keepdim=true} : f32[4,1]
  %2 = add(%1, 1e-06) : f32[4,1]
  %3 = rsqrt(%2) : f32[4,1]
  %4 = mul(%x, %3) : f32[4,8]
  %5 = mul(%4, %w) : f32[4,8]
  return %5
})");
  verify(*g);
  auto p = fusion::partition(*g, library_reductions());
  EXPECT_EQ(kinds(p), (std::vector<std::string>{"kernel", "mean", "kernel"}));
  EXPECT_EQ(p.groups.size(), 2u);
  // If the small value is also a graph output it must be materialized at its own shape.
  auto g2 = parse(R"(graph @rms(%x: f32[4,8]) {
  %0 = mean(%x) {dims=[-1], keepdim=true} : f32[4,1]
  %1 = rsqrt(%0) : f32[4,1]
  %2 = mul(%x, %1) : f32[4,8]
  return %2, %1
})");
  verify(*g2);
  auto p2 = fusion::partition(*g2, library_reductions());
  ASSERT_EQ(p2.groups.size(), 2u);
  for (auto& grp : p2.groups)
    for (Value* o : grp.outputs) EXPECT_EQ(o->type.shape, grp.shape);
}

TEST(Fusion, NoCycleThroughLibraryOps) {
  // %1 feeds both a library op and, through it, the consumer: fusing %1 with
  // %4 would need the sum before the kernel that produces its input.
  auto g = parse(R"(graph @g(%x: f32[4,8]) {
  %1 = exp(%x) : f32[4,8]
  %2 = sum(%1) {dims=[1], keepdim=true} : f32[4,1]
  %4 = div(%1, %2) : f32[4,8]
  return %4
})");
  verify(*g);
  auto p = fusion::partition(*g, library_reductions());
  EXPECT_EQ(kinds(p), (std::vector<std::string>{"kernel", "sum", "kernel"}));
}

TEST(Fusion, SubgraphInterpretsLikeTheOriginal) {
  auto g = parse(R"(graph @g(%x: f32[3,5], %row: f32[5], %col: f32[3]) {
  %0 = unsqueeze(%row) {dim=0} : f32[1,5]
  %1 = mul(%x, %0) : f32[3,5]
  %2 = unsqueeze(%col) {dim=1} : f32[3,1]
  %3 = add(%1, %2) : f32[3,5]
  %4 = tanh(%3) : f32[3,5]
  %5 = gt(%4, 0.0) : bool[3,5]
  %6 = exp(%4) : f32[3,5]
  %7 = where(%5, %4, %6) : f32[3,5]
  return %7
})");
  verify(*g);
  auto p = fusion::partition(*g);
  ASSERT_EQ(p.groups.size(), 1u);
  auto sub = fusion::extract_subgraph(p.groups[0], "k");
  verify(*sub);
  auto inputs = interp::random_inputs(*g, 7);
  auto want = interp::run(*g, inputs);
  // The kernel reads the unsqueezed views; their values are the same numbers.
  std::vector<interp::HostTensor> sub_inputs;
  auto views = interp::run(*parse(R"(graph @v(%row: f32[5], %col: f32[3]) {
  %0 = unsqueeze(%row) {dim=0} : f32[1,5]
  %1 = unsqueeze(%col) {dim=1} : f32[3,1]
  return %0, %1
})"), {inputs[1], inputs[2]});
  for (Value* in : sub->inputs())
    sub_inputs.push_back(in->name == "x" ? inputs[0] : (in->type.shape == Shape{1, 5} ? views[0] : views[1]));
  auto got = interp::run(*sub, sub_inputs);
  EXPECT_EQ(interp::max_abs_diff(got[0], want[0]), 0.0);
}

TEST(Codegen, VectorizedBroadcastEpilogue) {
  auto cg = compile_graph(R"(graph @g(%x: f32[8,16,8,8], %b: f32[16,1,1] param) {
  %0 = minimum(%x, 0.5) : f32[8,16,8,8]
  %1 = add(%0, %b) : f32[8,16,8,8]
  return %1
})", {{"dce"}, false});
  ASSERT_EQ(cg.kernels.size(), 1u);
  const auto& k = cg.kernels[0];
  EXPECT_EQ(k.name, "ff_pointwise_minimum_add_0");
  EXPECT_EQ(k.vector_width, 4);
  EXPECT_EQ(k.items, 8 * 16 * 64 / 4);
  EXPECT_NE(k.source.find("ff_vec<float, 4>"), std::string::npos);
  EXPECT_NE(k.source.find("o_in1[u] = i1;"), std::string::npos) << k.source;  // per-channel broadcast
  EXPECT_NE(k.source.find("ff_minimum(x_in0[u][k], 0.5f)"), std::string::npos) << k.source;
}

TEST(Codegen, DivisionByAConstantWithASmallOddPartIsADoubleMultiply) {
  // 6 = 3 x 2 and 0.375 = 3 / 8: x times 1/d in double, rounded once (correctly
  // rounded, and branch-free); 0.1f's odd part has 24 bits, a variable divisor
  // none: IEEE division.
  auto cg = compile_graph(R"(graph @g(%x: f32[64], %y: f32[64]) {
  %0 = div(%x, 6) : f32[64]
  %1 = div(%0, 0.375) : f32[64]
  %2 = div(%1, 0.1) : f32[64]
  %3 = div(%2, %y) : f32[64]
  return %3
})", {{"dce"}, false});
  ASSERT_EQ(cg.kernels.size(), 1u);
  const std::string& src = cg.kernels[0].source;
  EXPECT_NE(src.find("t0 = ff_div_by_constant(x_in0[u][k], 0.16666666666666666);"), std::string::npos) << src;
  EXPECT_NE(src.find("t1 = ff_div_by_constant(t0, 2.6666666666666665);"), std::string::npos) << src;
  EXPECT_NE(src.find("t2 = (t1 / 0.100000001f);"), std::string::npos) << src;
  EXPECT_NE(src.find("t3 = (t2 / x_in1[u][k]);"), std::string::npos) << src;
}

TEST(Codegen, TransposedInputIteratesInOutputOrder) {
  // The output keeps the permuted layout eager gives it: reads and writes both coalesce.
  auto cg = compile_graph(R"(graph @g(%x: f32[2,64,32]) {
  %0 = permute(%x) {dims=[0, 2, 1]} : f32[2,32,64]{2048,1,32}
  %1 = sigmoid(%0) : f32[2,32,64]{2048,1,32}
  return %1
})", {{"dce"}, false});
  ASSERT_EQ(cg.kernels.size(), 1u);
  EXPECT_EQ(cg.kernels[0].vector_width, 4);
  EXPECT_NE(cg.kernels[0].source.find("iteration space [4096]"), std::string::npos) << cg.kernels[0].source;
}

TEST(Codegen, PersistentRowsTakeTheRowsMaxAndMeanBeforeTheirElements) {
  // Rows held in registers: the softmax's sums of exp(x - max) all use the
  // row's max and the layer norm's deviations the row's mean, both merged
  // over the row before the element sweep (eager's two passes), so no partial
  // sum is rescaled in the merges.
  auto cg = compile_graph(R"(graph @g(%x: f32[512,4096], %y: f32[512,1024], %w: f32[1024] param, %b: f32[1024] param) {
  %0 = softmax(%x) {dim=1} : f32[512,4096]
  %1 = layer_norm(%y, %w, %b) {eps=1e-05, ndims=1} : f32[512,1024]
  return %0, %1
})", parse_compile_flags("--arch=90"));
  int checked = 0;
  for (const auto& k : cg.kernels) {
    const std::string& src = k.source;
    const bool softmax = k.name.find("softmax") != std::string::npos;
    if (!softmax && k.name.find("layer_norm") == std::string::npos) continue;
    ASSERT_NE(src.find("inputs held in registers across passes"), std::string::npos) << src;
    const size_t settled = src.find(softmax ? "the row's max, in every slot" : "the row's mean, in every slot");
    const size_t used = src.find(softmax ? ".rebase(next_" : "::of_chunk(");
    ASSERT_NE(settled, std::string::npos) << src;
    EXPECT_LT(settled, used) << src;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(Codegen, TransposingGroupStagesTilesThroughSharedMemory) {
  // A channels-last conv result written out in NCHW order: [N,C,HW] with the
  // input unit-stride along C and the output along HW.
  auto cg = compile_graph(R"(graph @g(%y: f32[2,64,10,10]{6400,1,640,64}, %b: f32[64,1,1]) {
  %0 = add(%y, %b) : f32[2,64,10,10]
  %1 = minimum(%0, 0.5) : f32[2,64,10,10]
  return %1
})", {{"dce"}, false});
  ASSERT_EQ(cg.kernels.size(), 1u);
  const auto& k = cg.kernels[0];
  EXPECT_EQ(k.grid[0], 1);  // one tile of 128 along HW's 100
  EXPECT_EQ(k.grid[1], 2);  // 64 / 32 along C
  EXPECT_EQ(k.grid[2], 2);  // N
  EXPECT_NE(k.source.find("__shared__ float tile_in0[128][33]"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("ff_vec<float, 4>"), std::string::npos) << k.source;  // 4 channels, then 4 pixels a load
  EXPECT_EQ(k.source.find("tile_in1"), std::string::npos);  // the broadcast bias is read directly
  EXPECT_TRUE(runtime::compile_kernel(k.source, k.name, 90).is_cubin);
}

TEST(Codegen, HalfRoundsIntermediatesAndWideIndexWhenNeeded) {
  auto cg = compile_graph(R"(graph @g(%x: f16[5,3]) {
  %0 = relu(%x) : f16[5,3]
  %1 = mul(%0, 0.5) : f16[5,3]
  return %1
})", {{"dce"}, false});
  const auto& src = cg.kernels[0].source;
  EXPECT_NE(src.find("ff_round_f16"), std::string::npos);
  EXPECT_NE(src.find("typedef int index_t"), std::string::npos);
  EXPECT_EQ(cg.kernels[0].vector_width, 1);  // 15 elements: not a multiple of 4
  auto big = compile_graph(R"(graph @g(%x: f32[65536,65536]) {
  %0 = mul(%x, 3.0) : f32[65536,65536]
  return %0
})", {{"dce"}, false});
  EXPECT_NE(big.kernels[0].source.find("typedef long long index_t"), std::string::npos);
}

TEST(Codegen, ScalarInputsBecomeKernelArguments) {
  auto cg = compile_graph(R"(graph @g(%A: f32[64,32], %s: f64[] scalar) {
  %0 = mul(%A, %s) : f32[64,32]
  return %0
})", {{"dce"}, false});
  const auto& k = cg.kernels[0];
  EXPECT_EQ(k.scalars, std::vector<std::string>{"s"});
  EXPECT_NE(k.source.find("double s0"), std::string::npos);
  EXPECT_NE(k.source.find("static_cast<float>(s0)"), std::string::npos) << k.source;
}

// Every kernel the code generator writes must compile with NVRTC for sm_90
// (no GPU needed). The test_kernels_compile pytest does this for every problem.
TEST(Codegen, NvrtcCompilesGeneratedKernels) {
  auto cg = compile_graph(R"(graph @g(%x: f16[4,8], %y: bf16[8], %i: i64[4,1], %s: f64[] scalar) {
  %0 = cast(%x) : f32[4,8]
  %1 = cast(%y) : f32[8]
  %2 = add(%0, %1) : f32[4,8]
  %3 = gelu(%2) {approximate="tanh"} : f32[4,8]
  %4 = cast(%i) : f32[4,1]
  %5 = mul(%3, %4) : f32[4,8]
  %6 = pow(%5, 2.0) : f32[4,8]
  %7 = remainder(%6, %s) : f32[4,8]
  %8 = isnan(%7) : bool[4,8]
  %9 = where(%8, 0.0, %7) : f32[4,8]
  %10 = cast(%9) : bf16[4,8]
  return %10, %8
})", {{"dce"}, false});
  ASSERT_EQ(cg.kernels.size(), 1u);
  auto k = runtime::compile_kernel(cg.kernels[0].source, cg.kernels[0].name, 90);
  EXPECT_TRUE(k.is_cubin);
  EXPECT_GT(k.image.size(), 1000u);
}

}  // namespace
}  // namespace ff
