// Conv kernels: which convs one covers (match_conv_kernel), how the conv
// scheduler groups them with their epilogue and when it prefers cuDNN, and
// what the generated source says. NVRTC compiles of it (CUTLASS's headers):
// tests/python/test_kernels_compile.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "codegen/cuda/conv.h"
#include "codegen/cuda/conv_direct.h"
#include "codegen/cuda/conv_sm90.h"
#include "codegen/cuda/sm90_ss_mainloop.h"
#include "kernel/conv.h"
#include "kernel/conv_cost.h"
#include "fusion/scheduler.h"
#include "passes/pass.h"

namespace ff {
namespace {

// What conv_engine may choose (its pass options) and the GPU the kernels are for.
struct ConvPolicy {
  passes::PassOptions pass;
  int arch = 0;
};

// Implicit-GEMM kernels where cuDNN was timed slower.
ConvPolicy conv_kernels() {
  ConvPolicy o;
  o.pass.conv_kernels = true;
  return o;
}

// Every conv a kernel covers as one (FUSEFORGE_CONV_KERNELS=always): for the
// tests of the kernels themselves, whatever cuDNN would time.
ConvPolicy every_conv_a_kernel() {
  ConvPolicy o = conv_kernels();
  o.pass.conv_always = true;
  return o;
}

// Direct kernels where the cost model prefers them.
ConvPolicy direct_kernels() {
  ConvPolicy o;
  o.pass.conv_direct = true;
  return o;
}

// The partition of `g` once conv_engine has chosen each conv's engine under `policy`.
fusion::Partition decide_and_partition(Graph& g, const ConvPolicy& policy) {
  passes::PassManager({"conv_engine"}, policy.pass).run(g);
  fusion::FusionOptions options;
  options.arch = policy.arch;
  return fusion::partition(g, options);
}

// The seed's conv, channels-last as conv_engine leaves it, with its epilogue
// (bias, min with a constant, a per-channel add, a scale) writing NCHW.
const char* kSeed = R"(graph @seed(%x: f32[128,64,128,128]{1048576,1,8192,64}, %w: f32[128,64,3,3]{576,1,192,64} param, %b: f32[128,1,1] param, %cb: f32[128] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], fp32_precision="ieee", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[128,128,126,126]{2032128,1,16128,128}
  %1 = view(%cb) : f32[128,1,1]
  %2 = add(%0, %1) : f32[128,128,126,126]
  %3 = minimum(%2, 0.5) : f32[128,128,126,126]
  %4 = add(%3, %b) : f32[128,128,126,126]
  %5 = mul(%4, 2.0) : f32[128,128,126,126]
  return %5
}
)";

Node* first_conv(const Graph& g) {
  for (auto& n : g.nodes())
    if (n->op == Op::Convolution) return n.get();
  return nullptr;
}

// The kernel spec of the first conv of `text` (verified), or nullopt where no kernel covers it.
std::optional<fusion::ConvKernelSpec> kernel_spec_of(const char* text) {
  auto g = parse(text);
  verify(*g);
  return fusion::match_conv_kernel(*first_conv(*g));
}

TEST(ConvKernel, CoversChannelsLastForwardConvsWithoutGroups) {
  const auto s = kernel_spec_of(kSeed);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->alignment, 4);  // 64 channels: 16-byte loads
  EXPECT_EQ(s->gemm_m(), 128 * 126 * 126);
  EXPECT_EQ(s->gemm_n(), 128);
  EXPECT_EQ(s->gemm_k(), 64 * 9);
  EXPECT_FALSE(s->conv.tf32);
}

// A 1x1 window's weight is laid out the same whichever strides its extent-1
// dims carry (the contiguous ones a layout pass leaves as they are).
TEST(ConvKernel, CoversOneByOneConvsWhateverTheirWeightsUnitStrides) {
  const auto s = kernel_spec_of(R"(graph @g(%x: f32[2,96,8,8]{6144,1,768,96}, %w: f32[48,96,1,1]{96,1,1,1} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,48,8,8]{3072,1,384,48}
  return %0
})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->gemm_k(), 96);
  // A 3x3 window's contiguous weight is not the kernel's layout.
  EXPECT_FALSE(kernel_spec_of(R"(graph @g(%x: f32[2,96,8,8]{6144,1,768,96}, %w: f32[48,96,3,3] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1], transposed=false} : f32[2,48,8,8]{3072,1,384,48}
  return %0
})"));
}

TEST(ConvKernel, LeavesContiguousTransposedGroupedAndNarrowConvsToCudnn) {
  const char* cases[] = {
      // contiguous operands
      R"(graph @g(%x: f32[2,8,10,10], %w: f32[16,8,3,3] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,16,8,8]
  return %0
})",
      // groups
      R"(graph @g(%x: f32[2,8,10,10]{800,1,80,8}, %w: f32[16,4,3,3]{36,1,12,4} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=2, padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,16,8,8]{1024,1,128,16}
  return %0
})",
      // transposed, in IEEE math (transposed kernels are 1xTF32 only)
      R"(graph @g(%x: f32[2,8,10,10]{800,1,80,8}, %w: f32[8,16,3,3]{1,72,24,8} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=true} : f32[2,16,12,12]{2304,1,192,16}
  return %0
})",
      // f16 with an odd channel count: 2-byte loads, below cp.async's 4
      R"(graph @g(%x: f16[2,3,10,10]{300,1,30,3}, %w: f16[16,3,3,3]{27,1,9,3} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f16[2,16,8,8]{1024,1,128,16}
  return %0
})"};
  for (const char* text : cases) {
    EXPECT_FALSE(kernel_spec_of(text)) << text;
  }
}

TEST(ConvKernel, TheEpilogueGroupJoinsTheConv) {
  auto g = parse(kSeed);
  verify(*g);
  const fusion::Partition p = decide_and_partition(*g, every_conv_a_kernel());
  ASSERT_EQ(p.groups.size(), 1u);
  const fusion::Group& group = p.groups[0];
  EXPECT_EQ(group.kind, fusion::Group::Kind::Conv);
  EXPECT_EQ(group.nodes.size(), 5u);  // conv, add, minimum, add, mul
  ASSERT_EQ(group.outputs.size(), 1u);
  EXPECT_TRUE(group.outputs[0]->type.is_contiguous());
  // Without conv kernels the conv is a library call and the epilogue a pointwise kernel.
  auto undecided = parse(kSeed);
  const fusion::Partition off = fusion::partition(*undecided);
  ASSERT_EQ(off.groups.size(), 1u);
  EXPECT_EQ(off.groups[0].kind, fusion::Group::Kind::Pointwise);
  // That pointwise group is also the conv kernel's library epilogue, which no step runs.
  ASSERT_EQ(group.library_epilogue, 0);
  ASSERT_EQ(p.library_epilogues.size(), 1u);
  const fusion::Group& epilogue = p.library_epilogues[0];
  EXPECT_EQ(epilogue.kind, fusion::Group::Kind::Pointwise);
  EXPECT_EQ(epilogue.nodes, std::vector<Node*>(group.nodes.begin() + 1, group.nodes.end()));
  EXPECT_EQ(epilogue.outputs, group.outputs);
  EXPECT_EQ(epilogue.inputs.front(), group.nodes.front()->result());
  EXPECT_EQ(off.groups[0].nodes.size(), epilogue.nodes.size());
  EXPECT_EQ(off.library_epilogues.size(), 0u);
}

TEST(ConvKernel, TheSourceFusesTheEpilogueAndWritesTheOutputsLayout) {
  auto g = parse(kSeed);
  verify(*g);
  const fusion::Partition p = decide_and_partition(*g, every_conv_a_kernel());
  const codegen::KernelSource ks = codegen::generate_conv(p.groups[0], p.groups[0].conv, 0, default_target());
  EXPECT_EQ(ks.name, "ff_conv2d_add_minimum_mul_3xtf32_128x128_0") << ks.source;
  EXPECT_NE(ks.source.find("cutlass::arch::OpMultiplyAddFastF32"), std::string::npos);
  EXPECT_NE(ks.source.find("DefaultConv2dFprop"), std::string::npos);
  // CUTLASS's headers kept apart (a file of many kernels includes them once,
  // outside any namespace); the kernel declared as every kernel is.
  EXPECT_EQ(ks.source.find("#include"), std::string::npos);
  EXPECT_NE(std::find(ks.includes.begin(), ks.includes.end(), "#include <cutlass/conv/kernel/default_conv2d_fprop.h>"),
            ks.includes.end());
  EXPECT_NE(ks.source.find("FF_EXTERN_C __global__ void"), std::string::npos);
  // NCHW output: threads walk pixels; per-channel inputs are read by channel.
  EXPECT_NE(ks.source.find("threads walking pixels"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("in0[col]"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("out[n * 2032128 + col * 15876 + p * 126 + q]"), std::string::npos) << ks.source;
  EXPECT_EQ(ks.inputs.size(), 4u);  // x, w, and the two per-channel tensors
  EXPECT_EQ(ks.align_bytes, 16);
  EXPECT_EQ(ks.grid[0], (128 * 126 * 126 + 127) / 128);
  EXPECT_EQ(ks.grid[1], 1);
  // A TF32 conv runs one TF32 MMA per product.
  std::string tf32 = kSeed;
  tf32.replace(tf32.find("\"ieee\""), 6, "\"tf32\"");
  auto h = parse(tf32);
  ConvPolicy always = every_conv_a_kernel();  // the cost model prefers cuDNN's TF32 conv here
  const fusion::Partition q = decide_and_partition(*h, always);
  ASSERT_EQ(q.groups[0].kind, fusion::Group::Kind::Conv);
  const codegen::KernelSource kt = codegen::generate_conv(q.groups[0], q.groups[0].conv, 0, default_target());
  EXPECT_NE(kt.name.find("_tf32_"), std::string::npos);
  EXPECT_EQ(kt.source.find("OpMultiplyAddFastF32"), std::string::npos);
}

TEST(ConvKernel, NarrowLoadsTakeTheSmallestTile) {
  // Three input channels: 4-byte loads, with which the bigger tiles spill.
  const auto s = kernel_spec_of(R"(graph @g(%x: f32[128,3,128,128]{49152,1,384,3}, %w: f32[32,3,3,3]{27,1,9,3} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1], transposed=false} : f32[128,32,128,128]{524288,1,4096,32}
  return %0
})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->alignment, 1);
  ASSERT_EQ(codegen::conv_tiles(*s).size(), 1u);
  EXPECT_EQ(codegen::choose_conv_tile(*s, default_target()).m, 64);
  auto wide = *s;
  wide.alignment = 4;
  EXPECT_EQ(codegen::conv_tiles(wide).size(), 3u);
}

TEST(ConvKernel, TheCostModelChoosesBetweenTheKernelAndCudnnAsTimed) {
  // f16: cuDNN's tensor-core conv (timed 0.6 ms) beats our mma.sync kernel
  // (modelled at 250 TFLOP/s: 1.2 ms with the margin) where compute dominates
  // and nothing is fused; where the conv is bandwidth-bound and a relu
  // follows (its value read by a library call), the fused kernel saves the
  // result's round trip through memory.
  // Not timed, a conv stays cuDNN's: the model's cuDNN rates are no ground to
  // replace it on.
  auto kind_of = [](const char* text) {
    auto g = parse(text);
    verify(*g);
    const fusion::Partition p = decide_and_partition(*g, conv_kernels());
    for (const fusion::Group& group : p.groups)
      if (group.kind == fusion::Group::Kind::Conv) return std::string("kernel");
    return std::string("cudnn");
  };
  EXPECT_EQ(kind_of(R"(graph @g(%x: f16[64,256,56,56]{802816,1,14336,256}, %w: f16[256,256,3,3]{2304,1,768,256} param) {
  %0 = convolution(%x, %w) {cudnn_channels_last_ms=0.6, cudnn_contiguous_ms=0.9, dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1], transposed=false} : f16[64,256,56,56]{802816,1,14336,256}
  %1 = opaque(%0) {args="[$0, [2, 2], [2, 2]]", target="aten.max_pool2d.default"} : f16[64,256,28,28]
  return %1
})"),
            "cudnn");
  const char* pointwise_1x1 = R"(graph @g(%x: f16[64,16,56,56]{50176,1,896,16}, %w: f16[16,16,1,1]{16,1,16,16} param) {
  %0 = convolution(%x, %w) {TIMES dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f16[64,16,56,56]{50176,1,896,16}
  %1 = relu(%0) : f16[64,16,56,56]{50176,1,896,16}
  %2 = opaque(%1) {args="[$0, [2, 2], [2, 2]]", target="aten.max_pool2d.default"} : f16[64,16,28,28]
  return %2
})";
  auto with = [&](const std::string& times) {
    std::string text = pointwise_1x1;
    return text.replace(text.find("TIMES "), 6, times);
  };
  EXPECT_EQ(kind_of(with("cudnn_channels_last_ms=0.005, cudnn_contiguous_ms=0.005, ").c_str()), "kernel");
  EXPECT_EQ(kind_of(with("").c_str()), "cudnn");
}

// A 1xTF32 conv on rounded operands, with cuDNN's channels-last conv timed at `cudnn_ms`.
std::string rounded_conv(double cudnn_ms) {
  return R"(graph @g(%x: f32[96,12,192,192]{442368,1,2304,12}, %w: f32[48,12,5,5]{300,1,60,12} param) {
  %0 = round_tf32(%x) : f32[96,12,192,192]{442368,1,2304,12}
  %1 = round_tf32(%w) : f32[48,12,5,5]{300,1,60,12}
  %2 = convolution(%0, %1) {cudnn_channels_last_ms=)" +
         std::to_string(cudnn_ms) + R"(, cudnn_contiguous_ms=9.0, dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[96,48,188,188]{1696512,1,9024,48}
  %3 = sigmoid(%2) : f32[96,48,188,188]
  return %3
}
)";
}

TEST(ConvKernel, TheHopperKernelOnRoundedOperandsIsWeighedAgainstCudnnAsTimed) {
  // 97.7 GFLOP gathered through L2 as 6.5 GB, its 651 MB result stored
  // behind the other warpgroup's wgmmas: about 0.9 ms modelled, against
  // cuDNN's timed conv plus the sigmoid's pass over its result (0.5 ms
  // modelled).
  ConvPolicy hopper = conv_kernels();
  hopper.arch = 90;
  auto conv_group = [&](Graph& graph) {
    const fusion::Partition p = decide_and_partition(graph, hopper);
    for (const fusion::Group& group : p.groups)
      if (group.kind == fusion::Group::Kind::Conv) return std::optional<fusion::Group>(group);
    return std::optional<fusion::Group>();
  };
  auto fast_cudnn = parse(rounded_conv(0.3)), slow_cudnn = parse(rounded_conv(3.0));
  verify(*fast_cudnn);
  verify(*slow_cudnn);
  EXPECT_FALSE(conv_group(*fast_cudnn));
  const auto g = conv_group(*slow_cudnn);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->conv.rounded_operands);
  const codegen::KernelSource ks = codegen::generate_conv_sm90(*g, g->conv, 0, default_target());
  // 128 x 64 tiles (48 channels) taken by the consumer warpgroups in turn, both operands straight from shared memory.
  EXPECT_NE(ks.source.find("constexpr int BM = 128, BN = 64"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("constexpr bool PINGPONG = true;"), std::string::npos);
  EXPECT_NE(ks.source.find("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"), std::string::npos);
  EXPECT_NE(ks.source.find("ff_sm90::ss::gemm(ConvA{x}, w,"), std::string::npos);
  // K = 300 ends in a partial k-block and N = 48 leaves B's last rows empty:
  // the producer tests both (a seed-shaped conv below needs neither).
  EXPECT_NE(ks.source.find("constexpr bool K_WHOLE = false, N_WHOLE = false;"), std::string::npos);
  auto whole = parse(R"(graph @g(%x: f32[2,64,10,10]{6400,1,640,64}, %w: f32[128,64,3,3]{576,1,192,64} param) {
  %0 = round_tf32(%x) : f32[2,64,10,10]{6400,1,640,64}
  %1 = round_tf32(%w) : f32[128,64,3,3]{576,1,192,64}
  %2 = convolution(%0, %1) {cudnn_channels_last_ms=9.0, cudnn_contiguous_ms=9.0, dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,128,8,8]{8192,1,1024,128}
  %3 = relu(%2) : f32[2,128,8,8]
  return %3
})");
  verify(*whole);
  const auto wg = conv_group(*whole);
  ASSERT_TRUE(wg && wg->conv.rounded_operands);
  EXPECT_NE(codegen::generate_conv_sm90(*wg, wg->conv, 0, default_target())
                .source.find("constexpr bool K_WHOLE = true, N_WHOLE = true;"),
            std::string::npos);
  // The NCHW f32 result leaves through shared memory, a bulk copy per channel's run of pixels.
  EXPECT_NE(ks.source.find("store_staged(epilogue, acc,"), std::string::npos);
  EXPECT_NE(ks.source.find("cp.async.bulk.global.shared::cta.bulk_group"), std::string::npos);
  EXPECT_NE(ks.source.find("static constexpr int SAMPLE = 35344;"), std::string::npos);
  EXPECT_NE(ks.source.find("return out + static_cast<long long>(n) * 1696512 + static_cast<long long>(col) * 35344;"),
            std::string::npos);
  EXPECT_EQ(ks.shared_bytes, codegen::sm90_ss_tile(48, 300, true).shared_bytes());
  EXPECT_LE(ks.shared_bytes, 227 * 1024);
  EXPECT_EQ(ks.items, (96 * 188 * 188 + 127) / 128);
}

TEST(ConvKernel, WideTilesPutThePixelsOnTheWgmmasNSide) {
  // 128 output channels written NCHW: tiles of 128 channels x 256 pixels, an
  // m64n256 wgmma a consumer warpgroup (its 64 channels), the weights as the
  // wgmma's A and the gathered pixels as its B; results staged in shared
  // memory and copied out per channel's run of pixels.
  const auto conv_of = [](const std::string& channels, bool nchw_result) {
    const int64_t c = std::stoll(channels);
    const std::string channels_last = std::to_string(256 * c) + ",1," + std::to_string(16 * c) + "," + channels;
    const std::string out = nchw_result ? "" : "{" + channels_last + "}";
    return "graph @g(%x: f32[4,64,18,18]{20736,1,1152,64}, %w: f32[" + channels +
           ",64,3,3]{576,1,192,64} param) {\n"
           "  %0 = round_tf32(%x) : f32[4,64,18,18]{20736,1,1152,64}\n"
           "  %1 = round_tf32(%w) : f32[" + channels + ",64,3,3]{576,1,192,64}\n"
           "  %2 = convolution(%0, %1) {dilation=[1, 1], fp32_precision=\"tf32\", groups=1, output_padding=[0, 0], "
           "padding=[0, 0], stride=[1, 1], transposed=false} : f32[4," + channels + ",16,16]{" + channels_last + "}\n"
           "  %3 = relu(%2) : f32[4," + channels + ",16,16]" + out + "\n"
           "  return %3\n}\n";
  };
  ConvPolicy hopper = every_conv_a_kernel();
  hopper.arch = 90;
  const auto kernel = [&](const std::string& text) {
    auto g = parse(text);
    verify(*g);
    const fusion::Partition p = decide_and_partition(*g, hopper);
    for (const fusion::Group& group : p.groups)
      if (group.kind == fusion::Group::Kind::Conv) {
        EXPECT_TRUE(group.conv.rounded_operands);
        return codegen::generate_conv_sm90(group, group.conv, 0, default_target());
      }
    ADD_FAILURE() << "no conv kernel";
    return codegen::KernelSource{};
  };
  const codegen::KernelSource ks = kernel(conv_of("256", true));
  EXPECT_NE(ks.source.find("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("wgmma(acc, b_desc(stage + wg * 8192 + ks * 32), b_desc(stage + A_TILE + ks * 32));"),
            std::string::npos);
  EXPECT_NE(ks.source.find("WideLoader<typename A::Rows>"), std::string::npos);
  EXPECT_NE(ks.source.find("store_tile(epilogue, acc,"), std::string::npos);
  EXPECT_NE(ks.source.find("store_channel_run(epilogue, copied,"), std::string::npos);  // the bulk copies' stores
  EXPECT_NE(ks.source.find("return value_at(row / 256, col, row / 16 % 16, row % 16, acc);"), std::string::npos);
  EXPECT_NE(ks.source.find("constexpr bool K_WHOLE = true, N_WHOLE = true;"), std::string::npos);
  // 1024 pixels: 4 runs of 256, each split between 2 tiles of 128 channels.
  EXPECT_EQ(ks.items, 4 * 2);
  const codegen::Sm90SsTile tile = codegen::sm90_ss_tile(256, 576, true, true);
  EXPECT_TRUE(tile.wide);
  EXPECT_EQ(tile.stages(), 3);
  EXPECT_EQ(ks.shared_bytes, tile.shared_bytes());
  EXPECT_LE(ks.shared_bytes, 227 * 1024);
  // Channels-last results (no runs of pixels) and 96 channels (a tile's 128
  // a quarter empty) keep the ping-pong tiles.
  EXPECT_EQ(kernel(conv_of("256", false)).source.find("store_tile("), std::string::npos);
  const std::string ninety_six = kernel(conv_of("96", true)).source;
  EXPECT_NE(ninety_six.find("constexpr bool PINGPONG = true;"), std::string::npos);
  EXPECT_EQ(ninety_six.find("store_tile("), std::string::npos);
}

TEST(ConvKernel, TheModelOfTheWideKernelFollowsItsMeasuredTimes) {
  // H200, conv + relu alone on rounded operands, NCHW results:
  // the seed's conv 1.19 ms, a 64 -> 128 channel one at 112x112 0.457 (both
  // wide); a 48 -> 96 channel one (ping-pong tiles) 0.292.
  const auto spec = [](int64_t batch, int64_t cin, int64_t size, int64_t cout, int64_t pad) {
    ConvSpec s;
    s.tf32 = true;
    s.batch = batch;
    s.in_channels = cin;
    s.out_channels = cout;
    s.input_size = {size, size};
    s.output_size = {size + 2 * pad - 2, size + 2 * pad - 2};
    s.kernel = {3, 3};
    s.stride = {1, 1};
    s.padding = {pad, pad};
    s.dilation = {1, 1};
    s.output_padding = {0, 0};
    return s;
  };
  EXPECT_NEAR(fusion::conv_times(spec(128, 64, 128, 128, 0), default_target(), true).kernel, 1.19, 0.06);
  EXPECT_NEAR(fusion::conv_times(spec(64, 64, 112, 128, 1), default_target(), true).kernel, 0.457, 0.03);
  EXPECT_NEAR(fusion::conv_times(spec(64, 48, 96, 96, 0), default_target(), true).kernel, 0.292, 0.03);
}

TEST(ConvKernel, StagedStoresTakeTheTilesPerChannelOperandsFromATable) {
  // A per-channel scale (a table entry, loaded once a tile) and a residual
  // (read per element at its coordinates) after a 1xTF32 conv on rounded operands.
  auto g = parse(R"(graph @g(%x: f32[96,12,192,192]{442368,1,2304,12}, %w: f32[48,12,5,5]{300,1,60,12} param, %s: f32[48,1,1] param, %r: f32[96,48,188,188]) {
  %0 = round_tf32(%x) : f32[96,12,192,192]{442368,1,2304,12}
  %1 = round_tf32(%w) : f32[48,12,5,5]{300,1,60,12}
  %2 = convolution(%0, %1) {dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[96,48,188,188]{1696512,1,9024,48}
  %3 = mul(%2, %s) : f32[96,48,188,188]
  %4 = add(%3, %r) : f32[96,48,188,188]
  return %4
}
)");
  verify(*g);
  ConvPolicy hopper = every_conv_a_kernel();
  hopper.arch = 90;
  const fusion::Partition p = decide_and_partition(*g, hopper);
  const fusion::Group* conv = nullptr;
  for (const fusion::Group& group : p.groups)
    if (group.kind == fusion::Group::Kind::Conv) conv = &group;
  ASSERT_TRUE(conv && conv->conv.rounded_operands);
  const codegen::KernelSource ks = codegen::generate_conv_sm90(*conv, conv->conv, 0, default_target());
  EXPECT_NE(ks.source.find("static constexpr int CHANNEL_OPERANDS = 1;"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("if (i == 0) return ff_load(in0[col]);"), std::string::npos);
  EXPECT_NE(ks.source.find("(v * table[0 * ff_sm90::ss::BN + (col & (ff_sm90::ss::BN - 1))])"), std::string::npos);
  EXPECT_NE(ks.source.find("ff_load(in1[n * 1696512 + col * 35344 + p * 188 + q])"), std::string::npos);
  // Each consumer warpgroup's table: one operand of the tile's 64 channels.
  codegen::Sm90SsTile tile = codegen::sm90_ss_tile(48, 300, true);
  EXPECT_EQ(ks.shared_bytes - tile.shared_bytes(), 2 * 64 * 4);
  tile.channel_operands = 1;
  EXPECT_EQ(ks.shared_bytes, tile.shared_bytes());
}

TEST(ConvKernel, HopperKernelGathersTheWindowAndStoresThroughTheEpilogue) {
  auto g = parse(kSeed);
  verify(*g);
  ConvPolicy hopper = every_conv_a_kernel();
  hopper.arch = 90;
  const fusion::Partition p = decide_and_partition(*g, hopper);
  ASSERT_EQ(p.groups[0].kind, fusion::Group::Kind::Conv);
  ASSERT_TRUE(codegen::sm90_conv_applies(p.groups[0].conv));
  const codegen::KernelSource ks = codegen::generate_conv_sm90(p.groups[0], p.groups[0].conv, 0, default_target());
  EXPECT_EQ(ks.name, "ff_conv2d_add_minimum_mul_3xtf32_sm90_0");
  EXPECT_TRUE(ks.sm90a);
  EXPECT_FALSE(ks.cutlass);
  EXPECT_EQ(ks.block, 384);
  // Persistent CTAs: at most one per SM, each walking tiles.
  EXPECT_EQ(ks.grid[0], 132);
  EXPECT_EQ(ks.items, (128 * 126 * 126 + 127) / 128);
  // A's rows: the window's origin per output pixel, channels k % C of tap k / C.
  EXPECT_NE(ks.source.find("static constexpr int C = 64, H = 128, W = 128, D = 1;"), std::string::npos) << ks.source;
  EXPECT_NE(ks.source.find("const int k = k0 + kk, c = k % C, tap = k / C;"), std::string::npos);
  // A pointer to each row's origin, opaque to the compiler (else it reloads x
  // per row); a 3-D conv's producer, short of registers, keeps offsets from x.
  EXPECT_NE(ks.source.find("src = origin[i] + ((dh * W + dw) * C + c);"), std::string::npos);
  EXPECT_NE(ks.source.find("r.origin[i] = ff_sm90::opaque_pointer(r.origin[i]);"), std::string::npos);
  auto g3 = parse(R"(graph @g(%x: f32[2,16,8,16,16]{32768,1,4096,256,16}, %w: f32[32,16,3,3,3]{432,1,144,48,16} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1, 1], groups=1, output_padding=[0, 0, 0], padding=[0, 0, 0], stride=[1, 1, 1], transposed=false} : f32[2,32,6,14,14]{37632,1,6272,448,32}
  return %0
})");
  verify(*g3);
  const fusion::Partition p3 = decide_and_partition(*g3, hopper);
  ASSERT_EQ(p3.groups[0].kind, fusion::Group::Kind::Conv);
  const std::string three_d = codegen::generate_conv_sm90(p3.groups[0], p3.groups[0].conv, 0, default_target()).source;
  EXPECT_NE(three_d.find("src = x + (origin[i] + ((dd * H + dh) * W + dw) * C + c);"), std::string::npos) << three_d;
  EXPECT_EQ(three_d.find("ff_sm90::opaque_pointer(r.origin[i])"), std::string::npos);
  EXPECT_NE(ks.source.find("ff_sm90::gemm_tf32<true>(ConvA{x}, w, M + opaque, N + opaque, K + opaque, LDB + opaque"),
            std::string::npos);
  EXPECT_NE(ks.source.find("LDB = 576;"), std::string::npos);  // B's rows are K long
  // The epilogue as the CUTLASS kernel's: NCHW output, per-channel inputs by channel.
  EXPECT_NE(ks.source.find("out[n * 2032128 + col * 15876 + p * 126 + q]"), std::string::npos);
  EXPECT_NE(ks.source.find("in0[col]"), std::string::npos);
  EXPECT_EQ(ks.inputs.size(), 4u);
  // Six input channels: 8-byte chunks, which the wgmma kernel's loads do not take.
  const auto s = kernel_spec_of(R"(graph @g(%x: f32[8,6,40,40]{9600,1,240,6}, %w: f32[48,6,3,3]{54,1,18,6} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1], transposed=false} : f32[8,48,40,40]{76800,1,1920,48}
  return %0
})");
  ASSERT_TRUE(s);
  EXPECT_FALSE(codegen::sm90_conv_applies(*s));
}

// A stride-2 4x4 transposed conv, 1xTF32, its operands rounded where laid
// out (the input channels-last, the weight [out][kh][kw][in]).
const char* kTransposed = R"(graph @up(%x: f32[2,8,5,7], %w: f32[8,12,4,4] param) {
  %0 = copy(%x) : f32[2,8,5,7]{280,1,56,8}
  %1 = round_tf32(%0) : f32[2,8,5,7]{280,1,56,8}
  %2 = copy(%w) : f32[8,12,4,4]{1,128,32,8}
  %3 = round_tf32(%2) : f32[8,12,4,4]{1,128,32,8}
  %4 = convolution(%1, %3) {dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[1, 1], stride=[2, 2], transposed=true} : f32[2,12,10,14]{1680,1,168,12}
  %5 = relu(%4) : f32[2,12,10,14]
  return %5
}
)";

// The same with a 3x3 window, which the stride does not divide.
const char* kTransposedOddWindow = R"(graph @up(%x: f32[2,8,5,7], %w: f32[8,12,3,3] param) {
  %0 = copy(%x) : f32[2,8,5,7]{280,1,56,8}
  %1 = round_tf32(%0) : f32[2,8,5,7]{280,1,56,8}
  %2 = copy(%w) : f32[8,12,3,3]{1,72,24,8}
  %3 = round_tf32(%2) : f32[8,12,3,3]{1,72,24,8}
  %4 = convolution(%1, %3) {dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[1, 1], stride=[2, 2], transposed=true} : f32[2,12,9,13]{1404,1,156,12}
  %5 = relu(%4) : f32[2,12,9,13]
  return %5
}
)";

// The conv group of `g` decided and partitioned with `options`, if any (its nodes are g's).
std::optional<fusion::Group> conv_group(Graph& g, const ConvPolicy& options) {
  for (const auto& gr : decide_and_partition(g, options).groups)
    if (gr.kind == fusion::Group::Kind::Conv) return gr;
  return std::nullopt;
}

// Whether `graph` (parsed) has a conv group partitioned with `options`.
bool has_conv_group(const std::string& graph, const ConvPolicy& options) {
  auto g = parse(graph);
  verify(*g);
  return conv_group(*g, options).has_value();
}

// The graph with cuDNN's times recorded on its conv, as the front end's probe records them.
std::string timed(std::string graph, const std::string& ms) {
  graph.replace(graph.find("dilation=[1, 1]"), 15,
                "cudnn_channels_last_ms=" + ms + ", cudnn_contiguous_ms=" + ms + ", dilation=[1, 1]");
  return graph;
}

TEST(ConvKernel, TransposedConvsWhoseStridesDivideTheirWindowsPackTheirPhasesIntoOneGemm) {
  auto g = parse(kTransposed);
  verify(*g);
  const auto s = fusion::match_conv_kernel(*first_conv(*g));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->rounded_operands);
  EXPECT_TRUE(s->conv.phases_packed());
  // Grid pixels 0..5 x 0..7 reach every phase's output pixels (2i + ph - 1 < 10, 2j + pw - 1 < 14).
  EXPECT_EQ(s->conv.phase_grid(0).first, 0);
  EXPECT_EQ(s->conv.phase_grid(0).extent, 6);
  EXPECT_EQ(s->conv.phase_grid(1).extent, 8);
  EXPECT_EQ(s->gemm_m(), 2 * 6 * 8);
  EXPECT_EQ(s->gemm_n(), 4 * 12);     // (ph, channel, pw)
  EXPECT_EQ(s->gemm_k(), 8 * 2 * 2);  // the 2x2 taps of a phase
  EXPECT_EQ(fusion::conv_kernel_weight_strides(s->conv, {8, 12, 4, 4}), (Shape{1, 128, 32, 8}));
  ConvPolicy hopper = every_conv_a_kernel();
  hopper.arch = 90;
  const auto conv = conv_group(*g, hopper);
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->nodes.size(), 2u);  // the relu fused
  const std::string src = codegen::generate_conv_sm90(*conv, conv->conv, 0, default_target()).source;
  EXPECT_NE(src.find("constexpr int M = 96, N = 48, K = 32, LDB = 128;"), std::string::npos) << src;
  // Wide tiles, whatever N, whose stores run along the output's rows.
  EXPECT_NE(src.find("store_tile(epilogue, acc,"), std::string::npos);
  EXPECT_NE(src.find("epilogue.put(at[u][g], v[g]);"), std::string::npos);
  // A phase row's 2 x 12 channels: a warp's 8 staged channels are runs of output channels.
  EXPECT_NE(src.find("static constexpr int SH = 2, SW = 2, K_OUT = 12;"), std::string::npos) << src;
  EXPECT_NE(src.find("CHANNEL_RUNS = PhaseGrid::SW * PhaseGrid::K_OUT % 8 == 0;"), std::string::npos);
  EXPECT_EQ(src.find("store_channel_run(epilogue, copied,"), std::string::npos);
  // Column (ph, o, pw)'s weight row: output channel o's taps from (ph, pw) on, 2 apart.
  EXPECT_NE(src.find("return o * ldw + (ph * S + pw) * C;"), std::string::npos);
  EXPECT_NE(src.find("col = (PhaseGrid::SH * th * S + PhaseGrid::SW * tw) * C + c - k0;"), std::string::npos);
  EXPECT_NE(src.find("t = k / C, th = t / TW, tw = t % TW, c = k % C;"), std::string::npos);  // 8 channels: tap-major k
  // By the cost model, against cuDNN as timed.
  ConvPolicy kernels = conv_kernels();
  kernels.arch = 90;
  EXPECT_TRUE(has_conv_group(timed(kTransposed, "100.0"), kernels));
  EXPECT_FALSE(has_conv_group(timed(kTransposed, "0.000001"), kernels));
}

// The pass a fused epilogue saves reads the conv's result and the epilogue's
// other operands: a residual as large as the result counts, as does a
// per-channel vector; a relu alone reads the result only.
TEST(ConvKernel, AnEpiloguesPassReadsTheResultAndItsOperands) {
  const double out = 2.0 * 12 * 10 * 14 * 4;  // f32[2,12,10,14]
  auto relu = parse(kTransposed);
  const Node& relu_conv = *first_conv(*relu);
  EXPECT_DOUBLE_EQ(fusion::epilogue_pass_bytes(relu_conv, fusion::epilogue_nodes(*relu, relu_conv)), 2 * out);
  auto residual = parse(R"(graph @up(%x: f32[2,8,5,7], %w: f32[8,12,4,4] param, %skip: f32[2,12,10,14], %b: f32[12,1,1] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[2, 2], transposed=true} : f32[2,12,10,14]
  %1 = add(%0, %skip) : f32[2,12,10,14]
  %2 = add(%1, 3.0) : f32[2,12,10,14]
  %3 = maximum(%2, 0.0) : f32[2,12,10,14]
  %4 = minimum(%3, 6.0) : f32[2,12,10,14]
  %5 = mul(%1, %4) : f32[2,12,10,14]
  %6 = mul(%5, %b) : f32[2,12,10,14]
  return %6
}
)");
  verify(*residual);
  const Node& residual_conv = *first_conv(*residual);
  EXPECT_DOUBLE_EQ(fusion::epilogue_pass_bytes(residual_conv, fusion::epilogue_nodes(*residual, residual_conv)),
                   3 * out + 12 * 4);
}

TEST(ConvKernel, OtherTransposedConvsAreOneGemmAPhaseOnlyWhereEveryConvMustBeAKernel) {
  auto g = parse(kTransposedOddWindow);
  verify(*g);
  const auto s = fusion::match_conv_kernel(*first_conv(*g));
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->conv.phases_packed());
  EXPECT_EQ(s->conv.phases(), 4);
  EXPECT_EQ(s->gemm_m(), 4 * 2 * 5 * 7);  // a phase: a 5x7 grid a sample
  EXPECT_EQ(s->gemm_n(), 12);
  EXPECT_EQ(s->gemm_k(), 8 * 2 * 2);      // up to 2x2 taps a phase
  ConvPolicy hopper = every_conv_a_kernel();
  hopper.arch = 90;
  const auto conv = conv_group(*g, hopper);
  ASSERT_TRUE(conv);
  const std::string src = codegen::generate_conv_sm90(*conv, conv->conv, 0, default_target()).source;
  // Tiles of one phase each, phases taken in turn; rows padded to whole tiles a phase.
  EXPECT_NE(src.find("const int tile = m / BM, phase = tile % PHASES, r = tile / PHASES * BM + m % BM;"),
            std::string::npos) << src;
  EXPECT_NE(src.find("constexpr int M = 512, N = 12, K = 32, LDB = 72;"), std::string::npos);
  // B's column of phase tap (th, tw): window tap (ph + 2 th, pw + 2 tw) of the weight's row, if the window has it.
  EXPECT_NE(src.find("col = ((ph + PhaseRow::SH * th) * S + pw + PhaseRow::SW * tw) * C + k % C - k0;"),
            std::string::npos);
  EXPECT_NE(src.find("return ph + PhaseRow::SH * th < R && pw + PhaseRow::SW * tw < S;"), std::string::npos);
  // Not by the cost model: the conv stays cuDNN's otherwise, however slow cuDNN was timed.
  ConvPolicy kernels = conv_kernels();
  kernels.arch = 90;
  EXPECT_FALSE(has_conv_group(timed(kTransposedOddWindow, "100.0"), kernels));
}

TEST(ConvKernel, DirectKernelsWhereShortReductionsIdleCudnn) {
  // IEEE f32 (no TF32 decided), NCHW, nothing fused: 6 input channels (54
  // multiply-adds an output) go to the direct kernel, 64 (576) stay cuDNN's.
  const ConvPolicy direct = direct_kernels();
  auto kind_of = [&](int64_t cin) {
    const std::string c = std::to_string(cin);
    auto g = parse("graph @g(%x: f32[32," + c + ",64,64], %w: f32[32," + c + R"(,3,3] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : f32[32,32,62,62]
  return %0
})");
    verify(*g);
    for (const fusion::Group& group : decide_and_partition(*g, direct).groups)
      if (group.kind == fusion::Group::Kind::Conv && group.conv.direct) return std::string("direct");
    return std::string("cudnn");
  };
  EXPECT_EQ(kind_of(6), "direct");
  EXPECT_EQ(kind_of(64), "cudnn");
}

TEST(ConvKernel, TheSchedulerRunsTheEngineTheConvNames) {
  // The scheduler weighs nothing: the same conv is a direct kernel where its
  // engine says so, cuDNN's where it says cudnn or nothing was decided.
  const auto kind_of = [](const std::string& engine) {
    auto g = parse("graph @g(%x: f32[32,6,64,64], %w: f32[32,6,3,3] param) {\n"
                   "  %0 = convolution(%x, %w) {dilation=[1, 1], " + engine +
                   "fp32_precision=\"ieee\", groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : "
                   "f32[32,32,62,62]\n  %1 = relu(%0) : f32[32,32,62,62]\n  return %1\n}\n");
    verify(*g);
    for (const fusion::Group& group : fusion::partition(*g).groups)
      if (group.kind == fusion::Group::Kind::Conv) return std::string(group.conv.direct ? "direct" : "implicit");
    return std::string("cudnn");
  };
  EXPECT_EQ(kind_of("engine=\"direct\", "), "direct");
  EXPECT_EQ(kind_of("engine=\"cudnn\", "), "cudnn");
  EXPECT_EQ(kind_of(""), "cudnn");
  // An implicit GEMM needs channels-last operands: on NCHW ones the conv stays cuDNN's.
  EXPECT_EQ(kind_of("engine=\"implicit_gemm\", "), "cudnn");
}

TEST(ConvKernel, TheDirectKernelAsTimedOverridesItsModel) {
  // 6 input channels: the direct kernel is modelled at about 0.025 ms (0.03
  // with the margin a model carries against cuDNN as timed). Timed (the
  // attribute direct_ms), its figure decides as it is, either way.
  const auto engine = [](const std::string& cudnn_ms, const std::string& direct_ms) {
    const std::string direct_attr = direct_ms.empty() ? "" : "direct_ms=" + direct_ms + ", ";
    auto g = parse("graph @g(%x: f32[32,6,64,64], %w: f32[32,6,3,3] param) {\n"
                   "  %0 = convolution(%x, %w) {cudnn_channels_last_ms=" + cudnn_ms + ", cudnn_contiguous_ms=" +
                   cudnn_ms + ", dilation=[1, 1], " + direct_attr +
                   "fp32_precision=\"ieee\", groups=1, padding=[0, 0], stride=[1, 1], transposed=false} : "
                   "f32[32,32,62,62]\n  return %0\n}\n");
    verify(*g);
    EXPECT_EQ(measured_direct_ms(*first_conv(*g)).has_value(), !direct_ms.empty());
    const ConvPolicy options = direct_kernels();
    for (const fusion::Group& group : decide_and_partition(*g, options).groups)
      if (group.kind == fusion::Group::Kind::Conv && group.conv.direct) return std::string("direct");
    return std::string("cudnn");
  };
  EXPECT_EQ(engine("0.05", ""), "direct");
  EXPECT_EQ(engine("0.05", "0.08"), "cudnn");
  EXPECT_EQ(engine("0.02", ""), "cudnn");
  EXPECT_EQ(engine("0.02", "0.015"), "direct");
}

TEST(ConvKernel, DirectKernelOnlyWhereTheConvsMathIsIeee) {
  // cuDNN as timed is slower either way; a conv whose math is TF32 (eager's
  // is) stays off the direct kernel, whose IEEE result would lie TF32's error
  // from eager's.
  const auto direct = [](const std::string& precision) {
    auto g = parse(R"(graph @g(%x: f32[4,6,20,20], %w: f32[16,6,3,3] param) {
  %0 = convolution(%x, %w) {cudnn_channels_last_ms=1.0, cudnn_contiguous_ms=1.0, dilation=[1, 1], fp32_precision=")" +
                   precision + R"(", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[4,16,18,18]
  %1 = relu(%0) : f32[4,16,18,18]
  return %1
})");
    verify(*g);
    const ConvPolicy options = direct_kernels();
    for (const fusion::Group& group : decide_and_partition(*g, options).groups)
      if (group.kind == fusion::Group::Kind::Conv && group.conv.direct) return true;
    return false;
  };
  EXPECT_TRUE(direct("ieee"));
  EXPECT_FALSE(direct("tf32"));
}

TEST(ConvKernel, DirectTilesFitTheRowAndStageChannelsInEqualParts) {
  ConvSpec s;
  s.batch = 8;
  s.in_channels = 8;
  s.out_channels = 32;
  s.input_size = {160, 160};
  s.output_size = {158, 158};
  s.kernel = {3, 3};
  s.stride = s.dilation = {1, 1};
  s.padding = s.output_padding = {0, 0};
  // 158 columns: 8 threads of 4 columns leave 2 idle, 32 threads would leave 98.
  codegen::DirectConvTile t = codegen::choose_direct_conv_tile(s, default_target());
  EXPECT_EQ(t.tq * t.px, 32);
  EXPECT_EQ(t.threads(), 256);
  // A 34x34 window a channel (pitch 40) and its weights, 5.6 KB: the 8
  // channels fit the 46 KB staged at once.
  EXPECT_EQ(t.iw_padded % 32, t.tq % 32);
  EXPECT_EQ(t.cib, 8);
  // 20 channels go as three stages of 7 (8 would fit).
  s.in_channels = 20;
  EXPECT_EQ(codegen::choose_direct_conv_tile(s, default_target()).cib, 7);
  s.in_channels = 8;
  s.output_size = {126, 126};
  s.input_size = {128, 128};
  t = codegen::choose_direct_conv_tile(s, default_target());
  EXPECT_EQ(t.tq, 32);  // 126 columns: one warp of 4 columns each leaves 2 idle
  // 8 rows' windows (10x160 a channel) take 52 KB for the 8 channels, 4 rows' 33 KB: 4 rows, one stage.
  EXPECT_EQ(t.tp, 4);
  EXPECT_EQ(t.cib, 8);
  EXPECT_TRUE(fusion::direct_conv_covers(s));
  // A stride of 64 stages a window 64 times the tile's width: it does not fit
  // shared memory even one row high, so the conv stays cuDNN's.
  s.stride = {64, 64};
  s.input_size = {8064, 8064};
  EXPECT_FALSE(codegen::direct_conv_fits(s));
  EXPECT_FALSE(fusion::direct_conv_covers(s));
  s.stride = {1, 1};
  // 46 columns: 3 a thread, 16 threads, 2 idle (4 a thread would idle 18).
  s.output_size = {46, 46};
  s.input_size = {48, 48};
  t = codegen::choose_direct_conv_tile(s, default_target());
  EXPECT_EQ(t.px, 3);
  EXPECT_EQ(t.tq, 16);
}

}  // namespace
}  // namespace ff
