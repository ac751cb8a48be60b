// Tests of the graph passes (csrc/passes/).
//
// Golden cases live in tests/golden/passes/<pass>/<case>.ir:
//
//   // RUN: canonicalize,dce          <- passes to run, in order (PassManager)
//   // free-form comments
//   graph @g(...) { ... }             <- the input graph
//   // CHECK:
//   // graph @g(...) {                <- the expected print() of the result,
//   //   ...                             each line commented out with "// " so
//   // }                                that ff-opt reads the file as is
//
// (Expected lines that are not commented out are taken verbatim.) Each case is
// registered as three tests:
//   PassesGolden.<pass>_<case>      the printed result equals the CHECK text;
//   PassesFixedPoint.<pass>_<case>  running the passes on the CHECK text changes
//                                   nothing (it parses, verifies and is final);
//   PassesInterp.<pass>_<case>      the CPU interpreter gives the same outputs
//                                   before and after, on 3 random input sets
//                                   (allclose rtol=1e-5, atol=1e-6 times the
//                                   output's largest magnitude, at least 1: a
//                                   reassociated sum's rounding scales with its
//                                   terms, not its result); skipped when the
//                                   input graph is not interpretable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "golden.h"
#include "interp/interpreter.h"
#include "ir/graph.h"
#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

using testing::GoldenCase;
using testing::line_diff;

// The RUN line: passes, comma-separated, in order.
std::vector<std::string> pass_list(const GoldenCase& c) {
  std::vector<std::string> out;
  std::stringstream ps(c.run);
  for (std::string p; std::getline(ps, p, ',');)
    if (!testing::trim(p).empty()) out.push_back(testing::trim(p));
  return out;
}

std::unique_ptr<Graph> run_passes(const GoldenCase& c, const std::string& text) {
  auto g = parse(text);
  verify(*g);
  passes::PassManager(pass_list(c)).run(*g);
  return g;
}

void check_golden(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  std::string actual = print(*run_passes(c, c.input));
  if (actual != c.expected)
    ADD_FAILURE() << "passes " << join(pass_list(c)) << " on " << c.path << " printed a different graph.\n"
                  << "diff (- expected, + actual):\n" << line_diff(c.expected, actual)
                  << "actual output, to paste after '// CHECK:':\n" << actual;
}

void check_fixed_point(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  std::string again = print(*run_passes(c, c.expected));
  if (again != c.expected)
    ADD_FAILURE() << "passes " << join(pass_list(c)) << " still change the CHECK graph of " << c.path << "\n"
                  << "diff (- CHECK, + after another run):\n" << line_diff(c.expected, again);
}

void check_interp(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  auto before = parse(c.input);
  verify(*before);
  std::string why;
  if (!interp::is_interpretable(*before, &why)) GTEST_SKIP() << "not interpretable: " << why;
  auto after = before->clone();
  passes::PassManager(pass_list(c)).run(*after);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto inputs = interp::random_inputs(*before, seed);
    auto want = interp::run(*before, inputs);
    auto got = interp::run(*after, inputs);
    ASSERT_EQ(want.size(), got.size()) << "output count changed";
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].dtype, got[i].dtype) << "output " << i << " dtype changed";
      double scale = 1.0;
      for (double v : want[i].data) scale = std::max(scale, std::fabs(v));
      EXPECT_TRUE(interp::allclose(got[i], want[i], 1e-5, 1e-6 * scale))
          << "output " << i << " (seed " << seed << ") differs after " << join(pass_list(c))
          << ": max |diff| = " << interp::max_abs_diff(got[i], want[i]);
    }
  }
}

std::string g_load_error;
size_t g_case_count = 0;

const bool kRegistered = [] {
  auto cases = testing::load_golden("passes", &g_load_error);
  g_case_count = cases.size();
  testing::register_golden("PassesGolden", cases, check_golden);
  testing::register_golden("PassesFixedPoint", cases, check_fixed_point);
  testing::register_golden("PassesInterp", cases, check_interp);
  return true;
}();

TEST(PassesGoldenFiles, AllLoad) {
  EXPECT_TRUE(g_load_error.empty()) << g_load_error;
  EXPECT_GE(g_case_count, 15u) << "golden cases under " FF_GOLDEN_DIR "/passes";
}

// ---- registry and pass manager

TEST(PassesRegistry, KnowsThePassesAndTheDefaultPipeline) {
  auto names = passes::pass_names();
  for (const char* p : {"canonicalize", "broadcast_matmul_operand", "matmul_sum_to_gemv", "gemv_as_reduction", "scale_matmul_operand", "broadcast_bmm_to_mm",
                        "conv_bias_epilogue", "conv_precision", "conv_engine", "round_conv_operands", "split_long_reduction", "decompose_long_norm", "recompute_pointwise", "pointwise_before_view", "view_before_pointwise",
                        "reduction_before_view", "region_before_view", "compose_pools", "drop_unit_pool_dim", "reverse_scan", "cse", "dce"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), p), names.end()) << p;
    EXPECT_EQ(passes::create_pass(p)->name(), p);
  }
  EXPECT_EQ(passes::default_pipeline(),
            (std::vector<std::string>{"conv_precision", "canonicalize", "drop_unit_pool_dim", "reverse_scan", "compose_pools", "broadcast_matmul_operand", "matmul_sum_to_gemv",
                                      "gemv_as_reduction", "scale_matmul_operand", "broadcast_bmm_to_mm", "conv_bias_epilogue",
                                      "conv_engine", "round_conv_operands", "decompose_long_norm", "region_before_view", "reduction_before_view", "view_before_pointwise", "split_long_reduction",
                                      "pointwise_before_view", "cse", "dce"}));
  EXPECT_THROW(passes::create_pass("no-such-pass"), IRError);
  EXPECT_THROW(passes::PassManager({"cse", "no-such-pass"}), IRError);
}

TEST(PassesRegistry, PassesReportWhetherTheyChangedTheGraph) {
  auto g = parse(R"(graph @g(%x: f32[4]) {
  %0 = mul(%x, 1.0) : f32[4]
  %1 = exp(%0) : f32[4]
  %2 = exp(%0) : f32[4]
  %3 = add(%1, %2) : f32[4]
  return %3
}
)");
  for (const char* p : {"canonicalize", "cse", "dce"}) {
    EXPECT_TRUE(passes::create_pass(p)->run(*g)) << p;
    verify(*g);
  }
  for (const char* p : {"canonicalize", "cse", "dce"}) EXPECT_FALSE(passes::create_pass(p)->run(*g)) << p;
  EXPECT_EQ(print(*g), R"(graph @g(%x: f32[4]) {
  %0 = exp(%x) : f32[4]
  %1 = add(%0, %0) : f32[4]
  return %1
}
)");
}

TEST(PassesRegistry, DefaultPipelineKeepsNamedValuesAndInputs) {
  auto g = parse(R"(graph @g(%x: f32[4], %unused: f32[4] param) {
  %y = neg(%x) : f32[4]
  %z = neg(%y) : f32[4]
  %w = exp(%z) : f32[4]
  return %w
}
)");
  passes::PassManager().run(*g);
  EXPECT_EQ(print(*g), R"(graph @g(%x: f32[4], %unused: f32[4] param) {
  %w = exp(%x) : f32[4]
  return %w
}
)");
}

// ---- canonicalize on random literal-arithmetic chains, against the interpreter

// A chain of add/sub/mul/div/neg with literals on x (and a second output in the
// middle of it), in dtype `dt`.
std::unique_ptr<Graph> random_chain(DType dt, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&](uint64_t n) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state % n;
  };
  const double floats[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 0.1, 0.25, -1.5, 4.0, 0.125};
  const int64_t ints[] = {0, 1, -1, 2, 3, -4};
  bool integral = is_integral(dt);
  auto g = std::make_unique<Graph>();
  g->name = "chain";
  TensorType t = TensorType::contiguous(dt, {64});
  Value* v = g->add_input("x", t);
  Value* mid = nullptr;
  int len = 2 + static_cast<int>(next(6));
  for (int k = 0; k < len; ++k) {
    Scalar lit = integral ? Scalar::of_int(ints[next(6)]) : Scalar::of_float(floats[next(12)]);
    if (!integral && next(4) == 0) lit = Scalar::of_int(ints[next(6)]);
    const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Neg, Op::Div};
    Op op = ops[next(integral ? 4 : 5)];
    std::vector<Operand> operands;
    if (op == Op::Neg) operands = {Operand::of(v)};
    else if ((op == Op::Add || op == Op::Mul) && next(3) == 0) operands = {Operand::of(lit), Operand::of(v)};
    else operands = {Operand::of(v), Operand::of(lit)};
    v = g->add_node(op, std::move(operands), {t})->result();
    if (k == len / 2) mid = v;
  }
  g->add_output(v);
  if (mid && mid != v) g->add_output(mid);
  verify(*g);
  return g;
}

TEST(PassesCanonicalize, RandomLiteralChainsMatchTheInterpreter) {
  // f16/bf16/integers get exact rules only: results must be identical up to the
  // sign of zero and to one subnormal step (a power-of-two mul chain whose
  // intermediate underflows rounds twice in eager). f32/f64 may also
  // reassociate: allclose(1e-5, 1e-6).
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32}) {
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      auto before = random_chain(dt, seed);
      auto after = before->clone();
      passes::PassManager().run(*after);
      bool exact = !(dt == DType::f32 || dt == DType::f64);
      double step = dt == DType::f16 ? std::ldexp(1.0, -24) : dt == DType::bf16 ? std::ldexp(1.0, -133) : 0.0;
      for (uint64_t in_seed = 1; in_seed <= 2; ++in_seed) {
        auto inputs = interp::random_inputs(*before, in_seed);
        auto want = interp::run(*before, inputs);
        auto got = interp::run(*after, inputs);
        ASSERT_EQ(want.size(), got.size());
        for (size_t i = 0; i < want.size(); ++i) {
          bool ok = exact ? interp::max_abs_diff(got[i], want[i]) <= step : interp::allclose(got[i], want[i], 1e-5, 1e-6);
          ASSERT_TRUE(ok) << dtype_name(dt) << " seed " << seed << " output " << i
                          << ": max |diff| = " << interp::max_abs_diff(got[i], want[i]) << "\nbefore:\n"
                          << print(*before) << "after:\n" << print(*after);
        }
      }
    }
  }
}

TEST(PassesPatterns, ReshapeRunsPairDimsOfEqualProducts) {
  using passes::reshape_runs;
  // [N, C, H, W] -> [N, G, C/G, H*W]: C splits, H and W merge.
  const auto runs = reshape_runs({2, 8, 6, 6}, {2, 2, 4, 36});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1], (passes::ReshapeRun{{1, 2}, {1, 3}}));
  EXPECT_EQ(runs[2], (passes::ReshapeRun{{2, 4}, {3, 4}}));
  // A size-1 dim joins the run before it.
  EXPECT_EQ(reshape_runs({4, 1, 6}, {4, 6}).front(), (passes::ReshapeRun{{0, 2}, {0, 1}}));
  EXPECT_TRUE(reshape_runs({4, 6}, {5, 5}).empty());  // other element counts
}

TEST(PassesPatterns, BroadcastThroughReshapeKeepsWholeRunsOrNone) {
  using passes::broadcast_through_reshape;
  const Shape from{2, 8, 6, 6}, to{2, 2, 4, 36};
  // Per channel: the split run spans the operand whole, the merged one skips it.
  EXPECT_EQ(broadcast_through_reshape({8, 1, 1}, from, to), (Shape{1, 2, 4, 1}));
  EXPECT_EQ(broadcast_through_reshape({2, 1, 1, 1}, from, to), (Shape{2, 1, 1, 1}));  // per sample
  EXPECT_EQ(broadcast_through_reshape({}, from, to), (Shape{1, 1, 1, 1}));  // a scalar
  EXPECT_EQ(broadcast_through_reshape(from, from, to), to);  // the tensor itself
  // Per row (h): the run merging H and W would hold it in part.
  EXPECT_FALSE(broadcast_through_reshape({6, 1}, from, to).has_value());
  EXPECT_FALSE(broadcast_through_reshape({3, 2, 8, 6, 6}, from, to).has_value());  // more dims than `from`
}

}  // namespace
}  // namespace ff
