#include <gtest/gtest.h>

#include <cmath>

#include "ir/graph.h"

namespace ff {
namespace {

const char* kGemm = R"(graph @gemm(%x: f32[4,8], %w: f32[16,8] param, %b: f32[16] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[8,16]{1,8}
  %1 = addmm(%b, %x, %0) : f32[4,16]
  %2 = sigmoid(%1) : f32[4,16]
  %3 = mul(%2, 2.0) : f32[4,16]
  %4 = add(%3, %1) : f32[4,16]
  return %4
}
)";

TEST(IR, PrintParseRoundTrip) {
  auto g = parse(kGemm);
  verify(*g);
  EXPECT_EQ(print(*g), kGemm);
  auto g2 = parse(print(*g));
  EXPECT_EQ(print(*g2), kGemm);
}

TEST(IR, RoundTripsLiteralsAttrsMultiResultsAndMutations) {
  const char* text = R"(graph @g(%x: f32[2,3,4], %rm: f32[3] buffer, %s: f64[] scalar, %n: i64[] buffer) {
  %0, %1 = opaque(%x) {args="[$0, 2, \"a\\\\b\"]", target="aten.max.dim"} : f32[2,3], i64[2,3]
  %2 = mul(%0, %s) : f32[2,3]
  %3 = where(true, %2, -inf) : f32[2,3]
  %4 = add(%3, 1e-05) : f32[2,3]
  %5 = maximum(%4, nan) : f32[2,3]
  %6 = sum(%5) {dims=[0], keepdim=false} : f32[3]
  %7 = add(%n, 1) : i64[]
  %8 = full(0.25) : f32[3]
  %9 = layer_norm(%x, %8, %8) {eps=1e-05, ndims=1} : f32[2,3,4]
  return %5, %1
  mutate %rm = %6
  mutate %n = %7
}
)";
  // layer_norm above has a weight of the wrong shape: the verifier must say so.
  auto g = parse(text);
  EXPECT_EQ(print(*g), text);
  try {
    verify(*g);
    FAIL() << "verify accepted a bad layer_norm weight";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("normalized shape"), std::string::npos) << e.what();
  }
}

TEST(IR, RenumbersTemporariesInDefinitionOrder) {
  auto g = parse(R"(graph @g(%x: f32[4]) {
  %7 = neg(%x) : f32[4]
  %named = exp(%7) : f32[4]
  %3 = abs(%named) : f32[4]
  return %3
})");
  EXPECT_EQ(print(*g), R"(graph @g(%x: f32[4]) {
  %0 = neg(%x) : f32[4]
  %named = exp(%0) : f32[4]
  %1 = abs(%named) : f32[4]
  return %1
}
)");
}

TEST(IR, RenumberingSkipsNumbersTakenByInputs) {
  const char* text = R"(graph @k(%0: f32[4], %s: f64[] scalar) {
  %1 = mul(%0, %s) : f32[4]
  %2 = neg(%1) : f32[4]
  return %2
}
)";
  auto g = parse(text);
  EXPECT_EQ(print(*g), text);
  EXPECT_EQ(print(*parse(print(*g))), text);
}

TEST(IR, ParseErrorsCarryLineAndColumn) {
  try {
    parse("graph @g(%x: f32[4]) {\n  %0 = frobnicate(%x) : f32[4]\n  return %0\n}");
    FAIL();
  } catch (const IRError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("line 2"), std::string::npos) << m;
    EXPECT_NE(m.find("unknown op 'frobnicate'"), std::string::npos) << m;
  }
  try {
    parse("graph @g(%x: f32[4]) {\n  %0 = neg(%y) : f32[4]\n  return %0\n}");
    FAIL();
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("undefined value '%y'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse("graph @g(%x: q7[4]) {\n return %x\n}"), IRError);
}

TEST(IR, VerifierRejectsWrongShapes) {
  auto g = parse(R"(graph @g(%x: f32[4,8], %y: f32[3,8]) {
  %0 = add(%x, %y) : f32[4,8]
  return %0
})");
  try {
    verify(*g);
    FAIL();
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("do not broadcast"), std::string::npos) << e.what();
  }
  auto g2 = parse(R"(graph @g(%x: f32[4,8]) {
  %0 = sum(%x) {dims=[1], keepdim=true} : f32[4]
  return %0
})");
  EXPECT_THROW(verify(*g2), IRError);
  auto g3 = parse(R"(graph @g(%a: f32[4,8], %b: f32[7,2]) {
  %0 = mm(%a, %b) : f32[4,2]
  return %0
})");
  try {
    verify(*g3);
    FAIL();
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions"), std::string::npos) << e.what();
  }
}

TEST(IR, ScansRoundTripAndCheckTheirAttributes) {
  const char* text = R"(graph @g(%x: f32[4,8]) {
  %0 = cumprod(%x) {dim=1, reverse=true} : f32[4,8]
  %1 = cumsum(%0) {dim=-2} : f64[4,8]
  return %1
}
)";
  auto g = parse(text);
  verify(*g);
  EXPECT_EQ(print(*g), text);
  EXPECT_EQ(scan_combine(Op::Cumsum), Op::Add);
  EXPECT_EQ(scan_combine(Op::Cumprod), Op::Mul);
  EXPECT_EQ(scan_combine(Op::Sum), std::nullopt);
  for (const char* bad : {"cumprod(%x) {dim=2} : f32[4,8]", "cumprod(%x) {dim=1, reverse=1} : f32[4,8]",
                          "cumprod(%x) {dim=1} : f32[4,9]"}) {
    auto b = parse(std::string("graph @g(%x: f32[4,8]) {\n  %0 = ") + bad + "\n  return %0\n}");
    EXPECT_THROW(verify(*b), IRError) << bad;
  }
}

TEST(IR, FlipIsAContiguousCopy) {
  auto g = parse(R"(graph @g(%x: f32[4,8]{1,4}) {
  %0 = flip(%x) {dims=[1, 0]} : f32[4,8]
  return %0
})");
  verify(*g);
  for (const char* bad : {"flip(%x) {dims=[1, -1]} : f32[4,8]", "flip(%x) {dims=[2]} : f32[4,8]",
                          "flip(%x) {dims=[0]} : f32[4,8]{1,4}"}) {
    auto b = parse(std::string("graph @g(%x: f32[4,8]{1,4}) {\n  %0 = ") + bad + "\n  return %0\n}");
    EXPECT_THROW(verify(*b), IRError) << bad;
  }
  // A 0-d tensor has dim 0 (and -1), as in torch.flip; nothing else.
  EXPECT_NO_THROW(verify(*parse("graph @g(%x: f32[]) {\n  %0 = flip(%x) {dims=[0]} : f32[]\n  return %0\n}")));
  EXPECT_THROW(verify(*parse("graph @g(%x: f32[]) {\n  %0 = flip(%x) {dims=[1]} : f32[]\n  return %0\n}")), IRError);
  EXPECT_THROW(verify(*parse("graph @g(%x: f32[]) {\n  %0 = flip(%x) {dims=[0]} : f32[4,8]\n  return %0\n}")), IRError);
}

TEST(IR, ViewStridesFollowATen) {
  auto g = parse(R"(graph @g(%x: f32[2,3,4]) {
  %0 = permute(%x) {dims=[0, 2, 1]} : f32[2,4,3]{12,1,4}
  %1 = unsqueeze(%0) {dim=1} : f32[2,1,4,3]{12,4,1,4}
  %2 = slice(%x) {dim=2, end=4, start=1, step=2} : f32[2,3,2]{12,4,2}
  %3 = view(%x) : f32[6,4]
  %4 = expand(%2) : f32[5,2,3,2]{0,12,4,2}
  %5 = select(%x) {dim=1, index=-1} : f32[2,4]{12,1}
  return %1, %3, %4, %5
})");
  EXPECT_NO_THROW(verify(*g));
  auto bad = parse(R"(graph @g(%x: f32[2,3]) {
  %0 = permute(%x) {dims=[1, 0]} : f32[3,2]
  return %0
})");
  EXPECT_THROW(verify(*bad), IRError);  // a permute is a view: strides {1,3}, not contiguous
}

TEST(IR, DtypePromotionOfZeroDimOperands) {
  // A 0-d f64 scalar input does not widen an f32 tensor (PyTorch's rule).
  auto g = parse(R"(graph @g(%x: f32[4], %s: f64[] scalar) {
  %0 = mul(%x, %s) : f32[4]
  return %0
})");
  EXPECT_NO_THROW(verify(*g));
  auto bad = parse(R"(graph @g(%x: f32[4], %y: f64[4]) {
  %0 = mul(%x, %y) : f32[4]
  return %0
})");
  EXPECT_THROW(verify(*bad), IRError);
}

TEST(IR, RoundToDtype) {
  EXPECT_EQ(round_to_dtype(1.0 + 1e-12, DType::f32), 1.0);
  EXPECT_EQ(round_to_dtype(65519.0, DType::f16), 65504.0);
  EXPECT_TRUE(std::isinf(round_to_dtype(65520.0, DType::f16)));
  EXPECT_EQ(round_to_dtype(1.0 + 1.0 / 2048, DType::f16), 1.0);  // tie rounds to even
  EXPECT_EQ(round_to_dtype(1.0 + 3.0 / 2048, DType::f16), 1.0 + 4.0 / 2048);
  EXPECT_EQ(round_to_dtype(1.00390625, DType::bf16), 1.0);  // 1 + 2^-8: tie to even
  EXPECT_EQ(round_to_dtype(2.7, DType::i64), 2.0);
}

}  // namespace
}  // namespace ff
