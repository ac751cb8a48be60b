// Tests of the convolution description (ir/conv.h) and of the passes that
// need the compile's options (conv_precision, conv_engine); their option-free
// behaviour is in the golden cases.
#include <gtest/gtest.h>

#include "ir/conv.h"
#include "kernel/conv_cost.h"
#include "passes/pass.h"

namespace ff {
namespace {

const char* kTwoConvs = R"(graph @g(%x: f32[8,64,32,32], %w: f32[64,64,3,3] param, %v: f32[8,64,16,16]) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[8,64,32,32]
  %1 = convolution(%v, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[8,64,16,16]
  %2 = relu(%0) : f32[8,64,32,32]
  %3 = relu(%1) : f32[8,64,16,16]
  return %2, %3
}
)";

Node* nth_conv(const Graph& g, int k) {
  for (auto& n : g.nodes())
    if (n->op == Op::Convolution && k-- == 0) return n.get();
  return nullptr;
}

TEST(ConvSpec, DescribesForwardAndTransposedConvs) {
  auto g = parse(R"(graph @g(%x: f32[2,8,5,5], %w: f32[8,3,4,4] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=2, output_padding=[1, 1], padding=[1, 1], stride=[2, 2], transposed=true} : f32[2,6,11,11]
  return %0
}
)");
  verify(*g);
  const auto s = conv_spec(*nth_conv(*g, 0));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->transposed);
  EXPECT_EQ(s->dims, 2);
  EXPECT_EQ(s->in_channels, 8);
  EXPECT_EQ(s->out_channels, 6);
  EXPECT_EQ(s->out_per_group(), 3);
  EXPECT_TRUE(s->grouped());
  EXPECT_FALSE(s->depthwise());
  // Each of the 2*8*25 input elements meets 3 outputs channels x 16 taps.
  EXPECT_DOUBLE_EQ(s->flops(), 2.0 * 2 * 8 * 25 * 3 * 16);
  EXPECT_EQ(s->output_padding, (Shape{1, 1}));
  EXPECT_FALSE(s->tf32);
}

TEST(ConvSpec, SignatureNamesShapesStridesAndParameters) {
  auto g = parse(kTwoConvs);
  EXPECT_EQ(conv_signature(*nth_conv(*g, 0)),
            "f32 x[8,64,32,32][65536,1024,32,1] w[64,64,3,3][576,9,3,1] stride=[1,1] padding=[1,1] "
            "dilation=[1,1] transposed=0 output_padding=[0,0] groups=1");
  EXPECT_NE(conv_signature(*nth_conv(*g, 0)), conv_signature(*nth_conv(*g, 1)));
}

TEST(ConvSpec, ChannelsLastStrides) {
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (Shape{60, 1, 15, 3}));
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5, 6}), (Shape{360, 1, 90, 18, 3}));
  EXPECT_TRUE(is_channels_last({DType::f32, {2, 3, 4, 5}, {60, 1, 15, 3}}));
  EXPECT_FALSE(is_channels_last(TensorType::contiguous(DType::f32, {2, 3, 4, 5})));
  // One channel: contiguous and channels-last at once.
  EXPECT_TRUE(is_channels_last(TensorType::contiguous(DType::f32, {2, 1, 4, 5})));
}

std::string precision_of(const Graph& g, int k) { return nth_conv(g, k)->attr_string("fp32_precision"); }

TEST(ConvPrecision, TF32OnlyWhereEagerUsesItOrThePolicyAllowsIt) {
  auto g = parse(kTwoConvs);
  passes::PassOptions options;
  options.eager_conv_tf32[conv_signature(*nth_conv(*g, 1))] = true;
  options.eager_conv_tf32[conv_signature(*nth_conv(*g, 0))] = false;
  passes::PassManager({"conv_precision"}, options).run(*g);
  EXPECT_EQ(precision_of(*g, 0), "ieee");
  EXPECT_EQ(precision_of(*g, 1), "tf32");

  auto h = parse(kTwoConvs);
  passes::PassOptions tf32;
  tf32.tf32 = true;
  passes::PassManager({"conv_precision"}, tf32).run(*h);
  EXPECT_EQ(precision_of(*h, 0), "tf32");
  EXPECT_EQ(precision_of(*h, 1), "tf32");
}

TEST(ConvPrecision, TheDecisionOnTheCapturedConvSurvivesTheOtherPasses) {
  // conv_engine changes the conv's operands (and so its signature) in the
  // first round; the second round must not decide again. (The first conv's
  // input comes from a kernel, which writes it channels-last for free.)
  auto g = parse(R"(graph @g(%x: f32[8,64,32,32], %w: f32[64,64,3,3] param, %v: f32[8,64,16,16]) {
  %0 = sigmoid(%x) : f32[8,64,32,32]
  %1 = convolution(%0, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[8,64,32,32]
  %2 = convolution(%v, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[8,64,16,16]
  %3 = relu(%1) : f32[8,64,32,32]
  %4 = relu(%2) : f32[8,64,16,16]
  return %3, %4
}
)");
  passes::PassOptions options;
  options.eager_conv_tf32[conv_signature(*nth_conv(*g, 0))] = true;
  passes::PassManager(passes::default_pipeline(), options).run(*g);
  EXPECT_EQ(precision_of(*g, 0), "tf32");
  EXPECT_TRUE(is_channels_last(nth_conv(*g, 0)->result()->type)) << print(*g);
  EXPECT_EQ(precision_of(*g, 1), "ieee");
  EXPECT_FALSE(is_channels_last(nth_conv(*g, 1)->result()->type)) << print(*g);
}

TEST(ConvEngine, ATimingOverridesTheCostModel) {
  // IEEE convs stay contiguous by the model; timed faster channels-last, they move.
  auto g = parse(kTwoConvs);
  passes::PassOptions options;
  options.conv_channels_last[conv_signature(*nth_conv(*g, 1))] = true;
  passes::PassManager({"conv_precision", "conv_engine"}, options).run(*g);
  EXPECT_FALSE(is_channels_last(nth_conv(*g, 0)->result()->type));
  EXPECT_TRUE(is_channels_last(nth_conv(*g, 1)->result()->type));
  EXPECT_TRUE(is_channels_last(nth_conv(*g, 1)->input(0)->type));
  EXPECT_TRUE(is_channels_last(nth_conv(*g, 1)->input(1)->type));
  // The relu reading it writes the returned value contiguous, as eager.
  EXPECT_TRUE(g->outputs()[1]->type.is_contiguous());
}

TEST(ConvPrecision, RecordsCudnnsTimesOnTheConvWhereTheyOutliveItsSignature) {
  // The front end's timings come by the captured conv's signature; the conv
  // scheduler reads them after conv_engine changed the operands' strides.
  auto g = parse(kTwoConvs);
  passes::PassOptions options;
  options.conv_cudnn[conv_signature(*nth_conv(*g, 1))] = CudnnTimes{0.05, 0.5};
  options.eager_conv_tf32[conv_signature(*nth_conv(*g, 1))] = true;
  passes::PassManager(passes::default_pipeline(), options).run(*g);
  EXPECT_FALSE(measured_cudnn(*nth_conv(*g, 0)));
  const auto recorded = measured_cudnn(*nth_conv(*g, 1));
  ASSERT_TRUE(recorded) << print(*g);
  EXPECT_EQ(recorded->contiguous_ms, 0.05);
  EXPECT_EQ(recorded->channels_last_ms, 0.5);
}

TEST(ConvPrecision, RecordsTheDirectKernelsTimeOnTheConv) {
  auto g = parse(kTwoConvs);
  passes::PassOptions options;
  options.conv_direct_ms[conv_signature(*nth_conv(*g, 0))] = 0.25;
  passes::PassManager(passes::default_pipeline(), options).run(*g);
  EXPECT_EQ(measured_direct_ms(*nth_conv(*g, 0)), std::optional<double>(0.25)) << print(*g);
  EXPECT_FALSE(measured_direct_ms(*nth_conv(*g, 1)));
}

// A 5x5 IEEE conv of 12 input channels with a relu, cuDNN timed at 3 ms in
// either layout, and the direct kernel timed at `direct_ms`.
std::string few_channels(double direct_ms) {
  return R"(graph @g(%x: f32[32,12,96,96], %w: f32[64,12,5,5] param) {
  %0 = convolution(%x, %w) {cudnn_channels_last_ms=3.0, cudnn_contiguous_ms=3.0, dilation=[1, 1], direct_ms=)" +
         std::to_string(direct_ms) + R"(, fp32_precision="ieee", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[32,64,92,92]
  %1 = relu(%0) : f32[32,64,92,92]
  return %1
}
)";
}

TEST(ConvEngine, EveryEngineIsWeighedAgainstEveryOther) {
  // Both kernels beat cuDNN; the implicit GEMM (3xTF32, channels-last, its
  // modelled time with the margin against timed figures) against the direct
  // kernel as timed decides, either way.
  passes::PassOptions options;
  options.conv_kernels = options.conv_direct = true;
  const auto spec = [] {
    auto g = parse(few_channels(1.0));
    return *conv_spec(*nth_conv(*g, 0));
  }();
  const CudnnTimes cudnn{3.0, 3.0};
  const double kernel = fusion::conv_times(spec, default_target(), true, false, &cudnn).kernel;
  ASSERT_LT(kernel, 1.5);  // the figures below keep clear of the conversions' few microseconds
  const auto decided = [&](double direct_ms) {
    auto g = parse(few_channels(direct_ms));
    verify(*g);
    passes::PassManager({"conv_engine"}, options).run(*g);
    const Node& conv = *nth_conv(*g, 0);
    return std::make_pair(std::string(conv_engine_name(*conv_engine(conv))), is_channels_last(conv.result()->type));
  };
  EXPECT_EQ(decided(2 * kernel), std::make_pair(std::string("implicit_gemm"), true));
  EXPECT_EQ(decided(kernel / 2), std::make_pair(std::string("direct"), false));
  // Without implicit GEMMs, the direct kernel as timed against cuDNN's.
  options.conv_kernels = false;
  EXPECT_EQ(decided(2 * kernel), std::make_pair(std::string("direct"), false));
  EXPECT_EQ(decided(4.0), std::make_pair(std::string("cudnn"), false));
}

TEST(ConvEngine, TheEngineIsDecidedOnceAndReadAsWritten) {
  // A conv that already has an engine keeps it (and its layout): the pass
  // decides nothing twice, so a later run changes nothing.
  auto g = parse(few_channels(0.1));
  nth_conv(*g, 0)->attrs["engine"] = std::string("cudnn");
  verify(*g);
  passes::PassOptions options;
  options.conv_kernels = options.conv_direct = true;
  const std::string before = print(*g);
  passes::PassManager({"conv_engine"}, options).run(*g);
  EXPECT_EQ(print(*g), before);
  // An engine the IR does not know is one clear error naming it.
  nth_conv(*g, 0)->attrs["engine"] = std::string("winograd");
  try {
    conv_engine(*nth_conv(*g, 0));
    FAIL() << "an unknown engine was read";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown conv engine 'winograd'"), std::string::npos) << e.what();
  }
}

TEST(ConvEngine, ConvKernelsTakeIeeeConvsChannelsLast) {
  // cuDNN's IEEE convs gain nothing channels-last; a 3xTF32 kernel (which
  // needs channels-last) is modelled faster than cuDNN's SIMT fp32 as timed
  // (2 ms here). Untimed, no implicit GEMM is weighed.
  const char* text = R"(graph @g(%x: f32[64,64,64,64], %w: f32[128,64,3,3] param) {
  %0 = relu(%x) : f32[64,64,64,64]
  %1 = convolution(%0, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[64,128,64,64]
  %2 = relu(%1) : f32[64,128,64,64]
  return %2
}
)";
  auto without = parse(text);
  passes::PassManager({"conv_precision", "conv_engine"}).run(*without);
  EXPECT_FALSE(is_channels_last(nth_conv(*without, 0)->result()->type)) << print(*without);
  auto with = parse(text);
  passes::PassOptions options;
  options.conv_kernels = true;
  auto untimed = parse(text);
  passes::PassManager({"conv_precision", "conv_engine"}, options).run(*untimed);
  EXPECT_FALSE(is_channels_last(nth_conv(*untimed, 0)->result()->type)) << print(*untimed);
  options.conv_cudnn[conv_signature(*nth_conv(*with, 0))] = CudnnTimes{2.0, 2.0};
  passes::PassManager({"conv_precision", "conv_engine"}, options).run(*with);
  EXPECT_TRUE(is_channels_last(nth_conv(*with, 0)->result()->type)) << print(*with);
  EXPECT_EQ(precision_of(*with, 0), "ieee");
}

TEST(ConvEngine, TransposedConvWeightsTakeTheKernelsLayoutOnlyWhereTheKernelWillRun) {
  // A 1xTF32 transposed conv whose phases pack (stride 2, window 4): its
  // weight ([in, out, kh, kw]) laid out for the kernel (input channels
  // unit-stride) where the kernel beats cuDNN as timed, else channels-last
  // (output channels unit-stride), the layout cuDNN reads.
  const std::string text = R"(graph @g(%x: f32[8,64,32,32], %w: f32[64,32,4,4] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], fp32_precision="tf32", groups=1, output_padding=[0, 0], padding=[1, 1], stride=[2, 2], transposed=true} : f32[8,32,64,64]
  %1 = relu(%0) : f32[8,32,64,64]
  return %1
}
)";
  const auto weight_strides = [&](double cudnn_ms) {
    auto g = parse(text);
    passes::PassOptions options;
    options.conv_kernels = true;
    options.conv_cudnn[conv_signature(*nth_conv(*g, 0))] = CudnnTimes{cudnn_ms, cudnn_ms};
    options.conv_channels_last[conv_signature(*nth_conv(*g, 0))] = true;
    passes::PassManager({"conv_precision", "conv_engine"}, options).run(*g);  // conv_precision records the times
    return nth_conv(*g, 0)->input(1)->type.strides;
  };
  EXPECT_EQ(weight_strides(100.0), (Shape{1, 1024, 256, 64}));
  EXPECT_EQ(weight_strides(0.000001), (Shape{512, 1, 128, 32}));
}

}  // namespace
}  // namespace ff
