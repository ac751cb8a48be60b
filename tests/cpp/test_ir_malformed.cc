// Malformed IR the fuzzer (tests/fuzz) found crashing, overflowing or throwing
// something other than IRError in parse/verify. Each must now be rejected with
// an IRError that says what is wrong; the raw inputs are also replayed from
// tests/fuzz/corpus by the fuzz test.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ff {
namespace {

struct Malformed {
  std::string name;
  std::string text;
  std::string message;  // a substring of the IRError's message
};
void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

// Input lines: one graph input %x (and %w), one node, return.
std::string graph_text(const std::string& inputs, const std::string& node, const std::string& type) {
  return "graph @g(" + inputs + ") {\n  %0 = " + node + " : " + type + "\n  return %0\n}\n";
}

class IRMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(IRMalformed, ThrowsIRErrorNamingTheProblem) {
  const Malformed& m = GetParam();
  try {
    verify(*parse(m.text));
    FAIL() << m.name << ": accepted";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find(m.message), std::string::npos) << m.name << ": " << e.what();
  }
}

const std::string kConvInputs = "%x: f32[2,4,10,10], %w: f32[8,4,3,3] param";
const std::string kConv = "convolution(%x, %w) {dilation=[1], padding=[0], stride=[1]";

const std::vector<Malformed> kCases = {
    {"shape_overflows", "graph @g(%x: f32[6,4611686018427387904]) {\n  return %x\n}\n", "overflows int64"},
    {"zero_size_dim_strides_overflow", "graph @g(%x: f32[0,4611686018427387904,4]) {\n  return %x\n}\n",
     "overflows int64"},
    {"integer_out_of_range", "graph @g(%x: f64[83333333333333333333333,4]) {\n  return %x\n}\n",
     "line 1, col 18: integer out of the int64 range"},
    {"literal_out_of_range",
     graph_text("%x: f64[4]", "add(%x, 99999999999999999999)", "f64[4]"),
     "integer '99999999999999999999' out of the int64 range"},
    {"negative_stride", "graph @g(%x: f32[2,3]{-3,1}) {\n  return %x\n}\n", "negative stride"},
    {"conv_negative_dilation",
     graph_text(kConvInputs, "convolution(%x, %w) {dilation=[-9223372036854775808, 1], padding=[0], stride=[1]}",
                       "f32[2,8,8,8]"),
     "dilation entries must be >= 1"},
    {"conv_zero_stride",
     graph_text(kConvInputs, "convolution(%x, %w) {dilation=[1], padding=[0], stride=[0]}", "f32[2,8,8,8]"),
     "stride entries must be >= 1"},
    {"conv_empty_stride",
     graph_text(kConvInputs, "convolution(%x, %w) {dilation=[1], padding=[0], stride=[]}", "f32[2,8,8,8]"),
     "stride has 0 entries for 2 spatial dims"},
    {"conv_negative_padding", graph_text(kConvInputs, kConv + ", padding=[-1]}", "f32[2,8,8,8]"),
     "padding entries must be >= 0"},
    {"conv_kernel_larger_than_input",
     graph_text("%x: f32[2,4,2,2], %w: f32[8,4,3,3]", kConv + "}", "f32[2,8,1,1]"),
     "does not fit input"},
    {"conv_zero_groups", graph_text(kConvInputs, kConv + ", groups=0}", "f32[2,8,8,8]"),
     "groups must be >= 1"},
    {"conv_transposed_channels_overflow",
     graph_text("%x: f32[1,3,5], %w: f32[3,4611686018427387904,1]",
                       "convolution(%x, %w) {dilation=[1], groups=4, padding=[0], stride=[1], transposed=true}",
                       "f32[1,2,5]"),
     "overflows int64"},
    {"cat_0d", graph_text("%x: f32[]", "cat(%x, %x) {dim=0}", "f32[2]"), "cannot concatenate 0-d"},
    {"cat_rank_mismatch", graph_text("%x: f32[2,3], %y: f32[2]", "cat(%x, %y) {dim=1}", "f32[2,4]"),
     "operand [2] does not fit [2,3] outside dim 1"},
    {"cat_other_dim_differs",
     graph_text("%x: f32[2,3], %y: f32[4,3]", "cat(%x, %y) {dim=1}", "f32[2,6]"),
     "operand [4,3] does not fit [2,3] outside dim 1"},
    {"select_0d", graph_text("%x: f32[]", "select(%x) {dim=0, index=0}", "f32[]"),
     "cannot select from a 0-d tensor"},
    {"slice_0d", graph_text("%x: f32[]", "slice(%x) {dim=0, start=0, end=1}", "f32[]"),
     "cannot slice a 0-d tensor"},
    {"pool_padding_overflows",
     graph_text("%x: f32[1,2,8,8]",
                "max_pool(%x) {kernel=[2, 2], padding=[4611686018427387904, 0], stride=[2, 2]}", "f32[1,2,4,4]"),
     "padding entries must be at most 2^31"},
    {"pool_window_too_large",
     graph_text("%x: f32[1,2,2097152,2097152,2]", "avg_pool(%x) {kernel=[2097152, 2097152, 2]}", "f32[1,2,1,1,1]"),
     "the window must have at most 2^31 taps"},
    {"unsqueeze_stride_overflows",
     graph_text("%x: f32[4611686018427387904]{4}", "unsqueeze(%x) {dim=0}", "f32[1,4611686018427387904]"),
     "overflows int64"},
};

INSTANTIATE_TEST_SUITE_P(FuzzRegressions, IRMalformed, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// The same rules still accept what they should, with the results PyTorch gives.
TEST(IRMalformed, EdgesThatStayValid) {
  // A slice whose step is larger than the dim keeps one element.
  auto g = parse(graph_text("%x: f32[4]", "slice(%x) {dim=0, start=0, end=4, step=9223372036854775807}",
                            "f32[1]{9223372036854775807}"));
  EXPECT_NO_THROW(verify(*g));
  // An empty slice has size 0.
  EXPECT_NO_THROW(verify(*parse(graph_text("%x: f32[4]", "slice(%x) {dim=0, start=3, end=1}", "f32[0]"))));
  // cat along dim 1 of matching shapes; a single-entry stride applies to every spatial dim.
  EXPECT_NO_THROW(verify(*parse(graph_text("%x: f32[2,3], %y: f32[2,5]", "cat(%x, %y) {dim=-1}", "f32[2,8]"))));
  EXPECT_NO_THROW(verify(*parse(graph_text(kConvInputs, "convolution(%x, %w) {dilation=[1], padding=[1], stride=[2]}",
                                           "f32[2,8,5,5]"))));
  // Transposed: (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
  EXPECT_NO_THROW(verify(*parse(graph_text(
      "%x: f32[1,8,5,5], %w: f32[8,4,3,3]",
      "convolution(%x, %w) {dilation=[1], output_padding=[1], padding=[1], stride=[2], transposed=true}",
      "f32[1,4,10,10]"))));
  // A view keeps strides torch gives on its extent-1 dims (an expanded
  // permuted [64, 1] weight); a step along another dim must still match.
  EXPECT_NO_THROW(verify(*parse(R"(graph @g(%w: f32[1,64]{1,1}) {
  %0 = expand(%w) : f32[2,1,64]{0,1,1}
  %1 = view(%0) : f32[2,1,64]{0,1,1}
  return %1
})")));
  EXPECT_THROW(verify(*parse(graph_text("%x: f32[2,64]", "view(%x)", "f32[2,1,64]{1,64,1}"))), IRError);
}

}  // namespace
}  // namespace ff
