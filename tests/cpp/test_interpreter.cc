// Tests of the CPU reference interpreter (csrc/interp): each parses a small IR
// text and checks exact, hand-computed results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "interp/interpreter.h"
#include "ir/graph.h"

namespace ff::interp {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

HostTensor T(DType dtype, Shape shape, std::vector<double> data) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}
HostTensor F32(Shape shape, std::vector<double> data) { return T(DType::f32, std::move(shape), std::move(data)); }

// Parses and verifies `text`, then runs it.
std::vector<HostTensor> RunIR(const std::string& text, const std::vector<HostTensor>& inputs) {
  auto g = parse(text);
  verify(*g);
  return run(*g, inputs);
}

double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

// Element-wise equality that treats NaN as equal to NaN.
void ExpectData(const HostTensor& t, const std::vector<double>& want, const char* what = "") {
  ASSERT_EQ(t.data.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(t.data[i])) << what << " [" << i << "] = " << t.data[i];
    else EXPECT_EQ(t.data[i], want[i]) << what << " [" << i << "]";
  }
}

// ---------------------------------------------------------------- pointwise

TEST(InterpPointwise, BroadcastAddAndLiteral) {
  auto out = RunIR(R"(graph @g(%a: f32[3,1], %b: f32[4]) {
  %0 = add(%a, %b) : f32[3,4]
  %1 = mul(%0, 2.0) : f32[3,4]
  %2 = sub(1, %b) : f32[4]
  return %0, %1, %2
})", {F32({3, 1}, {0, 10, 20}), F32({4}, {1, 2, 3, 4})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape, (Shape{3, 4}));
  EXPECT_EQ(out[0].dtype, DType::f32);
  ExpectData(out[0], {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24});
  ExpectData(out[1], {2, 4, 6, 8, 22, 24, 26, 28, 42, 44, 46, 48});
  ExpectData(out[2], {0, -1, -2, -3});
}

TEST(InterpPointwise, ActivationsKnownValues) {
  auto out = RunIR(R"(graph @g(%x: f64[4]) {
  %0 = sigmoid(%x) : f64[4]
  %1 = gelu(%x) : f64[4]
  %2 = gelu(%x) {approximate="tanh"} : f64[4]
  %3 = relu(%x) : f64[4]
  %4 = silu(%x) : f64[4]
  return %0, %1, %2, %3, %4
})", {T(DType::f64, {4}, {0.0, 1.0, -1.0, kNaN})});
  const auto &sig = out[0], &gelu = out[1], &gelu_tanh = out[2], &relu = out[3], &silu = out[4];
  EXPECT_EQ(sig.data[0], 0.5);
  EXPECT_NEAR(sig.data[1], 0.7310585786300049, 1e-15);
  EXPECT_NEAR(sig.data[2], 0.2689414213699951, 1e-15);
  EXPECT_TRUE(std::isnan(sig.data[3]));
  EXPECT_EQ(gelu.data[0], 0.0);
  EXPECT_NEAR(gelu.data[1], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(gelu.data[2], -0.15865525393145707, 1e-15);
  EXPECT_NEAR(gelu_tanh.data[1], 0.8411919906082768, 1e-15);  // differs from the erf form
  ExpectData(relu, {0.0, 1.0, 0.0, kNaN}, "relu");                 // NaN propagates
  EXPECT_NEAR(silu.data[1], 0.7310585786300049, 1e-15);
  EXPECT_NEAR(silu.data[2], -0.2689414213699951, 1e-15);
}

TEST(InterpPointwise, F32ResultsAreRoundedToF32) {
  auto out = RunIR(R"(graph @g(%x: f32[1]) {
  %0 = sigmoid(%x) : f32[1]
  return %0
})", {F32({1}, {2.0})});
  double exact = 1.0 / (1.0 + std::exp(-2.0));  // 0.8807970779778823
  EXPECT_EQ(out[0].data[0], f32(exact));
  EXPECT_NE(out[0].data[0], exact);
}

TEST(InterpPointwise, F16Rounding) {
  // f16 has 10 mantissa bits: 1 + 2^-11 is a tie (to even: 1), 1 + 3*2^-12 rounds up
  // to 1 + 2^-10, 2048 + 1 ties to 2048, and 60000 + 10000 overflows.
  auto out = RunIR(R"(graph @g(%a: f16[4], %b: f16[4]) {
  %0 = add(%a, %b) : f16[4]
  %1 = mul(%a, 0.1) : f16[4]
  return %0, %1
})", {T(DType::f16, {4}, {1.0, 1.0, 2048.0, 60000.0}), T(DType::f16, {4}, {0.00048828125, 0.000732421875, 1.0, 10000.0})});
  EXPECT_EQ(out[0].dtype, DType::f16);
  ExpectData(out[0], {1.0, 1.0009765625, 2048.0, kInf}, "add");
  EXPECT_EQ(out[1].data[0], 0.0999755859375);  // 0.1 in f16
  EXPECT_EQ(out[1].data[2], 204.75);           // 204.8 to the f16 grid (spacing 0.125)
}

TEST(InterpPointwise, RoundTf32KeepsTenMantissaBitsRoundingTiesAway) {
  // 1 + 2^-11 is a tie (away: 1 + 2^-10, where f16's tie goes to even), 1 +
  // 2^-12 rounds down, the largest tf32 below 2 plus a carry rounds up into
  // the exponent; NaN and infinities pass.
  const double ulp = std::ldexp(1.0, -10);
  auto out = RunIR(R"(graph @g(%x: f32[7]) {
  %0 = round_tf32(%x) : f32[7]
  return %0
})", {F32({7}, {1.0 + ulp / 2, 1.0 + ulp / 4, -(1.0 + 3 * ulp / 4), 2.0 - ulp / 2, kNaN, -kInf, 0.0})});
  ExpectData(out[0], {1.0 + ulp, 1.0, -(1.0 + ulp), 2.0, kNaN, -kInf, 0.0});
}

TEST(InterpPointwise, IntegerAndBoolPaths) {
  auto out = RunIR(R"(graph @g(%x: i64[5], %y: i64[5]) {
  %0 = gt(%x, 2) : bool[5]
  %1 = where(%0, %x, -1) : i64[5]
  %2 = div(%x, %y) : f32[5]
  %3 = remainder(%x, %y) : i64[5]
  %4 = fmod(%x, %y) : i64[5]
  %5 = logical_not(%0) : bool[5]
  %6 = sum(%0) : i64[]
  return %0, %1, %2, %3, %4, %5, %6
})", {T(DType::i64, {5}, {-7, 7, 3, 2, 5}), T(DType::i64, {5}, {3, -3, 2, 4, 5})});
  EXPECT_EQ(out[0].dtype, DType::boolean);
  ExpectData(out[0], {0, 1, 1, 0, 1}, "gt");
  ExpectData(out[1], {-1, 7, 3, -1, 5}, "where");
  ExpectData(out[2], {f32(-7.0 / 3), f32(-7.0 / 3), 1.5, 0.5, 1.0}, "true division");
  ExpectData(out[3], {2, -2, 1, 2, 0}, "remainder takes the divisor's sign");
  ExpectData(out[4], {-1, 1, 1, 2, 0}, "fmod takes the dividend's sign");
  ExpectData(out[5], {1, 0, 0, 1, 0}, "logical_not");
  EXPECT_EQ(out[6].dtype, DType::i64);
  ExpectData(out[6], {3}, "sum of bools");
}

TEST(InterpPointwise, CastRoundSignMinMax) {
  auto out = RunIR(R"(graph @g(%x: f32[6], %y: f32[6]) {
  %0 = cast(%x) : i64[6]
  %1 = cast(%x) : bool[6]
  %2 = round(%x) : f32[6]
  %3 = sign(%x) : f32[6]
  %4 = maximum(%x, %y) : f32[6]
  %5 = minimum(%x, %y) : f32[6]
  %6 = isnan(%x) : bool[6]
  return %0, %1, %2, %3, %4, %5, %6
})", {F32({6}, {-2.5, 2.5, 0.5, 0.0, 3.75, kNaN}), F32({6}, {0, 0, 1, kNaN, -1, 0})});
  ExpectData(out[0], {-2, 2, 0, 0, 3, 0}, "cast to i64 truncates");
  ExpectData(out[1], {1, 1, 1, 0, 1, 1}, "cast to bool is != 0");
  ExpectData(out[2], {-2, 2, 0, 0, 4, kNaN}, "round half to even");
  ExpectData(out[3], {-1, 1, 1, 0, 1, 0}, "sign");
  ExpectData(out[4], {0, 2.5, 1, kNaN, 3.75, kNaN}, "maximum propagates NaN");
  ExpectData(out[5], {-2.5, 0, 0.5, kNaN, -1, kNaN}, "minimum propagates NaN");
  ExpectData(out[6], {0, 0, 0, 0, 0, 1}, "isnan");
}

TEST(InterpPointwise, ComparisonCastsALiteralToTheTensorDtype) {
  // As in eager PyTorch, 0.1 is compared as an f32 (0.1f), so an f32 tensor holding
  // 0.1f equals it; in double 0.1f > 0.1.
  auto out = RunIR(R"(graph @g(%x: f32[2]) {
  %0 = eq(%x, 0.1) : bool[2]
  %1 = gt(%x, 0.1) : bool[2]
  return %0, %1
})", {F32({2}, {f32(0.1), 0.2})});
  ExpectData(out[0], {1, 0}, "eq");
  ExpectData(out[1], {0, 1}, "gt");
}

TEST(InterpPointwise, OperandsAreCastToTheResultDtypeFirst) {
  // Eager casts the 0-d f64 tensor and the literal to f32 before subtracting, so
  // 0.1f - 0.1 is exactly 0 there; in double it would be 1.49e-9.
  auto out = RunIR(R"(graph @g(%x: f32[2], %c: f64[] const) {
  %0 = sub(%x, %c) : f32[2]
  %1 = sub(%x, 0.1) : f32[2]
  return %0, %1
})", {F32({2}, {f32(0.1), 1.0}), T(DType::f64, {}, {0.1})});
  ExpectData(out[0], {0.0, f32(1.0 - f32(0.1))}, "0-d tensor operand");
  ExpectData(out[1], {0.0, f32(1.0 - f32(0.1))}, "literal operand");
}

TEST(InterpPointwise, FullAndScalarInput) {
  auto out = RunIR(R"(graph @g(%x: f32[2,2], %s: f64[] scalar) {
  %0 = full(%s) : f32[2,2]
  %1 = full(1.5) : f32[3]
  %2 = mul(%x, %s) : f32[2,2]
  return %0, %1, %2
})", {F32({2, 2}, {1, 2, 3, 4}), T(DType::f64, {}, {0.5})});
  ExpectData(out[0], {0.5, 0.5, 0.5, 0.5});
  ExpectData(out[1], {1.5, 1.5, 1.5});
  ExpectData(out[2], {0.5, 1, 1.5, 2});
}

// ---------------------------------------------------------------- reductions

TEST(InterpReduction, SumMeanAmaxDimsAndKeepdim) {
  auto out = RunIR(R"(graph @g(%x: f32[2,3]) {
  %0 = sum(%x) {dims=[1], keepdim=true} : f32[2,1]
  %1 = sum(%x) {dims=[-1], keepdim=false} : f32[2]
  %2 = mean(%x) {dims=[0], keepdim=false} : f32[3]
  %3 = amax(%x) : f32[]
  %4 = amax(%x) {dims=[0, 1], keepdim=true} : f32[1,1]
  %5 = amin(%x) {dims=[0]} : f32[3]
  %6 = prod(%x) {dims=[1]} : f32[2]
  return %0, %1, %2, %3, %4, %5, %6
})", {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(out[0].shape, (Shape{2, 1}));
  ExpectData(out[0], {6, 15}, "sum keepdim");
  EXPECT_EQ(out[1].shape, (Shape{2}));
  ExpectData(out[1], {6, 15}, "sum dim -1");
  ExpectData(out[2], {2.5, 3.5, 4.5}, "mean");
  EXPECT_EQ(out[3].shape, Shape{});
  ExpectData(out[3], {6}, "amax over all");
  EXPECT_EQ(out[4].shape, (Shape{1, 1}));
  ExpectData(out[4], {6}, "amax keepdim");
  ExpectData(out[5], {1, 2, 3}, "amin");
  ExpectData(out[6], {6, 120}, "prod");
}

TEST(InterpReduction, MiddleDimOfRank3AndNaN) {
  // x[i,j,k] = 100 i + 10 j + k, summed over j: 3 * (100 i + k) + 30.
  std::vector<double> x;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) x.push_back(100 * i + 10 * j + k);
  auto out = RunIR(R"(graph @g(%x: f64[2,3,4], %y: f32[2,2]) {
  %0 = sum(%x) {dims=[1], keepdim=false} : f64[2,4]
  %1 = amax(%y) {dims=[1]} : f32[2]
  %2 = any(%y) {dims=[0]} : bool[2]
  return %0, %1, %2
})", {T(DType::f64, {2, 3, 4}, x), F32({2, 2}, {kNaN, 0, 0, 0})});
  ExpectData(out[0], {30, 33, 36, 39, 330, 333, 336, 339}, "sum over the middle dim");
  ExpectData(out[1], {kNaN, 0}, "amax propagates NaN");
  ExpectData(out[2], {1, 0}, "any (NaN is true)");
}

TEST(InterpReduction, VarCorrection) {
  auto out = RunIR(R"(graph @g(%x: f64[4]) {
  %0 = var(%x) {correction=0, dims=[0]} : f64[]
  %1 = var(%x) {correction=1, dims=[0]} : f64[]
  %2 = var(%x) : f64[]
  return %0, %1, %2
})", {T(DType::f64, {4}, {1, 2, 3, 4})});
  EXPECT_EQ(out[0].data[0], 1.25);
  EXPECT_EQ(out[1].data[0], 5.0 / 3.0);
  EXPECT_EQ(out[2].data[0], 5.0 / 3.0);  // default correction is 1
}

TEST(InterpReduction, ArgmaxTiesAndNaN) {
  auto out = RunIR(R"(graph @g(%x: f32[2,4], %y: f32[5]) {
  %0 = argmax(%x) {dim=1} : i64[2]
  %1 = argmax(%x) {dim=1, keepdim=true} : i64[2,1]
  %2 = argmax(%x) : i64[]
  %3 = argmin(%x) {dim=1} : i64[2]
  %4 = argmax(%y) : i64[]
  %5 = argmin(%y) {dim=0} : i64[]
  %6 = argmax(%x) {dim=0} : i64[4]
  return %0, %1, %2, %3, %4, %5, %6
})", {F32({2, 4}, {1, 3, 3, 2, 5, 0, 5, 0}), F32({5}, {1, kNaN, 9, kNaN, -1})});
  EXPECT_EQ(out[0].dtype, DType::i64);
  ExpectData(out[0], {1, 0}, "first of the tied maxima");
  EXPECT_EQ(out[1].shape, (Shape{2, 1}));
  ExpectData(out[1], {1, 0}, "keepdim");
  ExpectData(out[2], {4}, "flattened");
  ExpectData(out[3], {0, 1}, "argmin ties");
  ExpectData(out[4], {1}, "the first NaN wins argmax");
  ExpectData(out[5], {1}, "and argmin");
  ExpectData(out[6], {1, 0, 1, 0}, "over dim 0");
}

TEST(InterpReduction, SoftmaxAndLogSoftmax) {
  auto out = RunIR(R"(graph @g(%x: f64[2,3]) {
  %0 = softmax(%x) {dim=1} : f64[2,3]
  %1 = log_softmax(%x) {dim=-1} : f64[2,3]
  %2 = softmax(%x) {dim=0} : f64[2,3]
  return %0, %1, %2
})", {T(DType::f64, {2, 3}, {1, 2, 3, 1000, 1000, 1000})});
  const auto& s = out[0].data;
  EXPECT_NEAR(s[0], 0.09003057317038046, 1e-15);
  EXPECT_NEAR(s[1], 0.24472847105479767, 1e-15);
  EXPECT_NEAR(s[2], 0.6652409557748219, 1e-15);
  EXPECT_NEAR(s[0] + s[1] + s[2], 1.0, 1e-15);
  for (int k = 3; k < 6; ++k) EXPECT_NEAR(s[k], 1.0 / 3.0, 1e-15) << "large inputs must not overflow";
  EXPECT_NEAR(out[1].data[0], -2.4076059644443806, 1e-14);
  EXPECT_NEAR(out[1].data[2], -0.4076059644443804, 1e-14);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(out[2].data[k], 0.0) << "exp(-999) underflows";
  for (int k = 3; k < 6; ++k) EXPECT_EQ(out[2].data[k], 1.0);
}

TEST(InterpReduction, LogsumexpShiftsByTheMaxAndKeepsInfinities) {
  auto out = RunIR(R"(graph @g(%x: f64[4,3], %y: f32[2,2]) {
  %0 = logsumexp(%x) {dims=[1], keepdim=false} : f64[4]
  %1 = logsumexp(%x) {dims=[0], keepdim=true} : f64[1,3]
  %2 = logsumexp(%y) {dims=[0, 1], keepdim=false} : f32[]
  return %0, %1, %2
})", {T(DType::f64, {4, 3}, {1, 2, 3, 1000, 1000, 1000, -kInf, -kInf, -kInf, kInf, 0, kNaN}),
      F32({2, 2}, {0, 0, 0, 0})});
  EXPECT_NEAR(out[0].data[0], 3.4076059644443806, 1e-14);
  EXPECT_NEAR(out[0].data[1], 1000 + std::log(3.0), 1e-12) << "exp(1000) must not overflow";
  EXPECT_EQ(out[0].data[2], -kInf) << "an all -inf row: the shift is 0, log(0)";
  EXPECT_TRUE(std::isnan(out[0].data[3])) << "NaN propagates";
  EXPECT_EQ(out[1].shape, (Shape{1, 3}));
  EXPECT_EQ(out[1].data[0], kInf) << "+inf: the shift is 0 and the sum overflows";
  EXPECT_EQ(out[2].data[0], f32(std::log(4.0)));
}

TEST(InterpReduction, LayerNorm) {
  auto out = RunIR(R"(graph @g(%x: f64[2,4], %w: f64[4] param, %b: f64[4] param) {
  %0 = layer_norm(%x, %w, %b) {eps=0.0, ndims=1} : f64[2,4]
  %1 = layer_norm(%x, %w, %b) {eps=0.75, ndims=1} : f64[2,4]
  return %0, %1
})", {T(DType::f64, {2, 4}, {1, 2, 3, 4, 5, 5, 5, 5}), T(DType::f64, {4}, {1, 1, 2, 2}),
      T(DType::f64, {4}, {0, 0, 0, 1})});
  // Row 0: mean 2.5, population variance 1.25.
  double r = 1.0 / std::sqrt(1.25);
  std::vector<double> want = {-1.5 * r, -0.5 * r, 2 * 0.5 * r, 2 * 1.5 * r + 1};
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(out[0].data[k], want[k], 1e-15) << k;
  // eps = 0.75 makes rstd = 1/sqrt(2) in row 0; row 1 is constant: normalized to 0,
  // leaving the bias (with eps = 0 it is 0 * inf = NaN, as in PyTorch).
  EXPECT_NEAR(out[1].data[0], -1.5 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(out[1].data[3], 2 * 1.5 / std::sqrt(2.0) + 1, 1e-15);
  ExpectData(out[1], {out[1].data[0], out[1].data[1], out[1].data[2], out[1].data[3], 0, 0, 0, 1}, "constant row");
  EXPECT_TRUE(std::isnan(out[0].data[4]));
}

TEST(InterpScan, Cumsum) {
  auto out = RunIR(R"(graph @g(%x: f32[2,3], %h: f16[3]) {
  %0 = cumsum(%x) {dim=1} : f32[2,3]
  %1 = cumsum(%x) {dim=0} : f32[2,3]
  %2 = cumsum(%h) {dim=0} : f16[3]
  return %0, %1, %2
})", {F32({2, 3}, {1, 2, 3, 4, 5, 6}), T(DType::f16, {3}, {2048, 1, 1})});
  ExpectData(out[0], {1, 3, 6, 4, 9, 15}, "dim 1");
  ExpectData(out[1], {1, 2, 3, 5, 7, 9}, "dim 0");
  // The running sum is kept in double (2049, 2050); only each output is rounded.
  ExpectData(out[2], {2048, 2048, 2050}, "f16");
}

TEST(InterpLayout, Flip) {
  auto out = RunIR(R"(graph @g(%x: f32[2,3]) {
  %0 = flip(%x) {dims=[1]} : f32[2,3]
  %1 = flip(%x) {dims=[0, -1]} : f32[2,3]
  return %0, %1
})", {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ExpectData(out[0], {3, 2, 1, 6, 5, 4}, "dim 1");
  ExpectData(out[1], {6, 5, 4, 3, 2, 1}, "both dims");
}

TEST(InterpScan, CumprodAndReverseScans) {
  auto out = RunIR(R"(graph @g(%x: f32[2,3]) {
  %0 = cumprod(%x) {dim=1} : f32[2,3]
  %1 = cumprod(%x) {dim=1, reverse=true} : f32[2,3]
  %2 = cumsum(%x) {dim=0, reverse=true} : f32[2,3]
  %3 = cumsum(%x) {dim=1, reverse=false} : f32[2,3]
  return %0, %1, %2, %3
})", {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ExpectData(out[0], {1, 2, 6, 4, 20, 120}, "cumprod");
  ExpectData(out[1], {6, 6, 3, 120, 30, 6}, "reverse cumprod");
  ExpectData(out[2], {5, 7, 9, 4, 5, 6}, "reverse cumsum along dim 0");
  ExpectData(out[3], {1, 3, 6, 4, 9, 15}, "reverse=false");
}

// ---------------------------------------------------------------- matmul

TEST(InterpMatmul, MmAddmmBmm) {
  auto out = RunIR(R"(graph @g(%a: f32[2,3], %b: f32[3,2], %bias: f32[2], %p: f32[2,1,2], %q: f32[2,2,1]) {
  %0 = mm(%a, %b) : f32[2,2]
  %1 = addmm(%bias, %a, %b) : f32[2,2]
  %2 = addmm(%bias, %a, %b) {alpha=2.0, beta=0.5} : f32[2,2]
  %3 = bmm(%p, %q) : f32[2,1,1]
  return %0, %1, %2, %3
})", {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({3, 2}, {7, 8, 9, 10, 11, 12}), F32({2}, {100, 200}),
      F32({2, 1, 2}, {1, 2, 3, 4}), F32({2, 2, 1}, {5, 6, 7, 8})});
  ExpectData(out[0], {58, 64, 139, 154}, "mm");
  ExpectData(out[1], {158, 264, 239, 354}, "addmm");
  ExpectData(out[2], {166, 228, 328, 408}, "addmm alpha/beta");
  EXPECT_EQ(out[3].shape, (Shape{2, 1, 1}));
  ExpectData(out[3], {17, 53}, "bmm");
}

TEST(InterpMatmul, AddmmBetaZeroIgnoresNaNBias) {
  auto out = RunIR(R"(graph @g(%bias: f32[1,2], %a: f32[1,1], %b: f32[1,2]) {
  %0 = addmm(%bias, %a, %b) {beta=0.0} : f32[1,2]
  return %0
})", {F32({1, 2}, {kNaN, 1}), F32({1, 1}, {2}), F32({1, 2}, {3, 4})});
  ExpectData(out[0], {6, 8});
}

// ---------------------------------------------------------------- layout

TEST(InterpLayout, ViewsAndCopies) {
  auto out = RunIR(R"(graph @g(%x: f32[2,3], %y: f32[2,5], %z: f32[3,1]) {
  %0 = permute(%x) {dims=[1, 0]} : f32[3,2]{1,3}
  %1 = slice(%y) {dim=1, end=100, start=-4, step=2} : f32[2,2]{5,2}
  %2 = select(%x) {dim=1, index=-1} : f32[2]{3}
  %3 = expand(%z) : f32[2,3,2]{0,1,0}
  %4 = view(%x) : f32[3,2]
  %5 = unsqueeze(%x) {dim=1} : f32[2,1,3]{3,3,1}
  %6 = squeeze(%5) {dims=[1]} : f32[2,3]
  %7 = view(%0) : f32[6]
  %8 = slice(%0) {dim=0, end=2, start=1} : f32[1,2]{1,3}
  return %0, %1, %2, %3, %4, %5, %6, %7, %8
})", {F32({2, 3}, {0, 1, 2, 3, 4, 5}), F32({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), F32({3, 1}, {7, 8, 9})});
  ExpectData(out[0], {0, 3, 1, 4, 2, 5}, "permute");
  ExpectData(out[1], {1, 3, 6, 8}, "slice with negative start, clamped end, step");
  ExpectData(out[2], {2, 5}, "select with a negative index");
  EXPECT_EQ(out[3].shape, (Shape{2, 3, 2}));
  ExpectData(out[3], {7, 7, 8, 8, 9, 9, 7, 7, 8, 8, 9, 9}, "expand");
  ExpectData(out[4], {0, 1, 2, 3, 4, 5}, "view");
  EXPECT_EQ(out[5].shape, (Shape{2, 1, 3}));
  ExpectData(out[5], {0, 1, 2, 3, 4, 5}, "unsqueeze");
  EXPECT_EQ(out[6].shape, (Shape{2, 3}));
  // A view of a permuted value reads its logical (row-major) order, not memory order.
  ExpectData(out[7], {0, 3, 1, 4, 2, 5}, "view of a permute");
  ExpectData(out[8], {1, 4}, "slice of a permute");
}

TEST(InterpLayout, Cat) {
  auto out = RunIR(R"(graph @g(%a: f32[2,1], %b: f32[2,2], %c: f32[1,2]) {
  %0 = cat(%a, %b) {dim=1} : f32[2,3]
  %1 = cat(%b, %c, %b) {dim=0} : f32[5,2]
  %2 = cat(%a, %b) {dim=-1} : f32[2,3]
  return %0, %1, %2
})", {F32({2, 1}, {1, 2}), F32({2, 2}, {3, 4, 5, 6}), F32({1, 2}, {7, 8})});
  ExpectData(out[0], {1, 3, 4, 2, 5, 6}, "dim 1");
  ExpectData(out[1], {3, 4, 5, 6, 7, 8, 3, 4, 5, 6}, "dim 0");
  ExpectData(out[2], {1, 3, 4, 2, 5, 6}, "dim -1");
}

// ---------------------------------------------------------------- graph level

TEST(InterpGraph, MutationsComeAfterOutputs) {
  auto out = RunIR(R"(graph @g(%x: f32[2], %rm: f32[2] buffer, %n: i64[] buffer) {
  %0 = mul(%rm, 0.5) : f32[2]
  %1 = add(%0, %x) : f32[2]
  %2 = add(%n, 1) : i64[]
  %3 = neg(%x) : f32[2]
  return %3, %x
  mutate %rm = %1
  mutate %n = %2
})", {F32({2}, {1, 2}), F32({2}, {4, 8}), T(DType::i64, {}, {41})});
  ASSERT_EQ(out.size(), 4u);
  ExpectData(out[0], {-1, -2}, "output 0");
  ExpectData(out[1], {1, 2}, "an input returned as an output");
  ExpectData(out[2], {3, 6}, "new running stat");
  EXPECT_EQ(out[3].dtype, DType::i64);
  EXPECT_EQ(out[3].shape, Shape{});
  ExpectData(out[3], {42}, "new counter");
}

TEST(InterpGraph, InputMismatchNamesTheInput) {
  auto g = parse(R"(graph @g(%x: f32[2,3], %gemm.weight: f32[3] param) {
  %0 = add(%x, %gemm.weight) : f32[2,3]
  return %0
})");
  auto expect_error = [&](const std::vector<HostTensor>& inputs, const std::string& needle) {
    try {
      run(*g, inputs);
      ADD_FAILURE() << "run accepted bad inputs (expected '" << needle << "')";
    } catch (const IRError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  HostTensor x = F32({2, 3}, {0, 0, 0, 0, 0, 0});
  expect_error({x, F32({4}, {0, 0, 0, 0})}, "%gemm.weight");
  expect_error({x, T(DType::f16, {3}, {0, 0, 0})}, "%gemm.weight");
  expect_error({F32({3, 2}, {0, 0, 0, 0, 0, 0}), F32({3}, {0, 0, 0})}, "%x");
  expect_error({x}, "inputs");
  EXPECT_EQ(run(*g, {x, F32({3}, {1, 2, 3})})[0].data[5], 3.0);  // and good inputs run
}

TEST(InterpGraph, OpaqueIsNotInterpretable) {
  auto g = parse(R"(graph @g(%x: f32[2,3]) {
  %0 = relu(%x) : f32[2,3]
  %1, %2 = opaque(%0) {args="[$0, 1]", target="aten.max.dim"} : f32[2], i64[2]
  return %1
})");
  std::string why;
  EXPECT_FALSE(is_interpretable(*g, &why));
  EXPECT_NE(why.find("opaque"), std::string::npos) << why;
  EXPECT_NE(why.find("aten.max.dim"), std::string::npos) << why;
  EXPECT_THROW(run(*g, random_inputs(*g, 1)), IRError);

  auto ok = parse("graph @g(%x: f32[2]) {\n  %0 = relu(%x) : f32[2]\n  return %0\n}\n");
  EXPECT_TRUE(is_interpretable(*ok, &why));
  EXPECT_TRUE(why.empty());
}

TEST(InterpGraph, ContradictoryDeclaredShapeIsAnError) {
  // The parser does not verify; the interpreter must not index out of bounds.
  auto g = parse(R"(graph @g(%x: f32[2,3]) {
  %0 = sum(%x) {dims=[1]} : f32[3]
  return %0
})");
  EXPECT_THROW(run(*g, random_inputs(*g, 1)), IRError);
}

// ---------------------------------------------------------------- helpers

TEST(InterpHelpers, RandomTensorIsDeterministicAndInRange) {
  auto a = random_tensor(TensorType::contiguous(DType::bf16, {1000}), 7);
  auto b = random_tensor(TensorType::contiguous(DType::bf16, {1000}), 7);
  auto c = random_tensor(TensorType::contiguous(DType::bf16, {1000}), 8);
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  bool negative = false;
  for (double v : a.data) {
    EXPECT_GE(v, -2.0);
    EXPECT_LT(v, 2.0);
    EXPECT_EQ(v, round_to_dtype(v, DType::bf16));
    negative |= v < 0;
  }
  EXPECT_TRUE(negative);
  auto i = random_tensor(TensorType::contiguous(DType::i32, {1000}), 3);
  auto m = random_tensor(TensorType::contiguous(DType::boolean, {1000}), 3);
  int trues = 0;
  for (double v : i.data) EXPECT_TRUE(v >= 0 && v < 8 && v == std::floor(v)) << v;
  for (double v : m.data) {
    EXPECT_TRUE(v == 0 || v == 1) << v;
    trues += v == 1;
  }
  EXPECT_GT(trues, 400);
  EXPECT_LT(trues, 600);

  auto g = parse("graph @g(%x: f32[3], %y: f32[3], %s: i64[] scalar) {\n  return %x\n}\n");
  auto in = random_inputs(*g, 5);
  ASSERT_EQ(in.size(), 3u);
  EXPECT_NE(in[0].data, in[1].data);  // each input has its own stream
  EXPECT_EQ(in[2].shape, Shape{});
  EXPECT_EQ(in[0].data, random_inputs(*g, 5)[0].data);
}

TEST(InterpHelpers, MaxAbsDiffAndAllclose) {
  HostTensor a = F32({4}, {1, kNaN, kInf, 4});
  HostTensor b = F32({4}, {1.5, kNaN, kInf, 4});
  EXPECT_EQ(max_abs_diff(a, b), 0.5);
  EXPECT_TRUE(allclose(a, b, 0.0, 0.5));
  EXPECT_FALSE(allclose(a, b, 0.0, 0.4));
  EXPECT_TRUE(allclose(a, b, 0.34, 0.0));  // 0.5 <= 0.34 * 1.5
  HostTensor c = F32({4}, {1, 2, kInf, 4});
  EXPECT_EQ(max_abs_diff(a, c), kInf);  // NaN on one side only
  EXPECT_FALSE(allclose(a, c, 1.0, 1.0));
  HostTensor d = F32({4}, {1, kNaN, -kInf, 4});
  EXPECT_FALSE(allclose(a, d, 1.0, 1.0));  // infinities must match
  EXPECT_THROW(max_abs_diff(a, F32({2, 2}, {1, 2, 3, 4})), IRError);
}

}  // namespace
}  // namespace ff::interp
