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
//                                   (allclose rtol=1e-5, atol=1e-6); skipped when
//                                   the input graph is not interpretable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "interp/interpreter.h"
#include "ir/graph.h"
#include "passes/pass.h"

namespace ff {
namespace {

namespace fs = std::filesystem;

struct GoldenCase {
  std::string id;    // <pass>_<case>, a valid gtest name
  std::string path;
  std::vector<std::string> passes;
  std::string input;
  std::string expected;
};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  return lines;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Parses a golden file; throws std::runtime_error naming what is malformed.
GoldenCase load_case(const fs::path& path, const fs::path& root) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::stringstream buf;
  buf << in.rdbuf();
  std::vector<std::string> lines = split_lines(buf.str());
  GoldenCase c;
  c.path = path.string();
  std::string rel = fs::relative(path, root).replace_extension("").generic_string();
  for (char& ch : rel)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  c.id = rel;
  if (lines.empty() || lines[0].rfind("// RUN:", 0) != 0) throw std::runtime_error(c.path + ": first line must be '// RUN: <passes>'");
  std::stringstream ps(lines[0].substr(7));
  for (std::string p; std::getline(ps, p, ',');)
    if (!trim(p).empty()) c.passes.push_back(trim(p));
  size_t check = 0;
  for (size_t i = 1; i < lines.size() && !check; ++i)
    if (trim(lines[i]) == "// CHECK:") check = i;
  if (!check) throw std::runtime_error(c.path + ": no '// CHECK:' line");
  for (size_t i = 1; i < check; ++i) c.input += lines[i] + "\n";
  std::vector<std::string> expected(lines.begin() + check + 1, lines.end());
  while (!expected.empty() && trim(expected.back()).empty()) expected.pop_back();
  bool commented = std::all_of(expected.begin(), expected.end(),
                               [](const std::string& l) { return trim(l).empty() || l.rfind("//", 0) == 0; });
  for (std::string l : expected) {
    if (commented && l.rfind("//", 0) == 0) l = l.substr(l.rfind("// ", 0) == 0 ? 3 : 2);
    c.expected += l + "\n";
  }
  return c;
}

std::vector<GoldenCase> load_all(std::string* error) {
  std::vector<GoldenCase> cases;
  fs::path root = fs::path(FF_GOLDEN_DIR) / "passes";
  if (!fs::exists(root)) {
    *error = root.string() + " does not exist";
    return cases;
  }
  std::vector<fs::path> files;
  for (auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".ir") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    try {
      cases.push_back(load_case(f, root));
    } catch (const std::exception& e) {
      *error += std::string(e.what()) + "\n";
    }
  }
  return cases;
}

// A line diff (LCS) of expected vs actual: "-" lines only expected, "+" only actual.
std::string line_diff(const std::string& expected, const std::string& actual) {
  auto a = split_lines(expected), b = split_lines(actual);
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) out += "   " + a[i++] + "\n", j++;
    else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) out += "+  " + b[j++] + "\n";
    else out += "-  " + a[i++] + "\n";
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::unique_ptr<Graph> run_passes(const GoldenCase& c, const std::string& text) {
  auto g = parse(text);
  verify(*g);
  passes::PassManager(c.passes).run(*g);
  return g;
}

void check_golden(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  std::string actual = print(*run_passes(c, c.input));
  if (actual != c.expected)
    ADD_FAILURE() << "passes " << join(c.passes) << " on " << c.path << " printed a different graph.\n"
                  << "diff (- expected, + actual):\n" << line_diff(c.expected, actual)
                  << "actual output, to paste after '// CHECK:':\n" << actual;
}

void check_fixed_point(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  std::string again = print(*run_passes(c, c.expected));
  if (again != c.expected)
    ADD_FAILURE() << "passes " << join(c.passes) << " still change the CHECK graph of " << c.path << "\n"
                  << "diff (- CHECK, + after another run):\n" << line_diff(c.expected, again);
}

void check_interp(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  auto before = parse(c.input);
  verify(*before);
  std::string why;
  if (!interp::is_interpretable(*before, &why)) GTEST_SKIP() << "not interpretable: " << why;
  auto after = before->clone();
  passes::PassManager(c.passes).run(*after);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto inputs = interp::random_inputs(*before, seed);
    auto want = interp::run(*before, inputs);
    auto got = interp::run(*after, inputs);
    ASSERT_EQ(want.size(), got.size()) << "output count changed";
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].dtype, got[i].dtype) << "output " << i << " dtype changed";
      EXPECT_TRUE(interp::allclose(got[i], want[i], 1e-5, 1e-6))
          << "output " << i << " (seed " << seed << ") differs after " << join(c.passes)
          << ": max |diff| = " << interp::max_abs_diff(got[i], want[i]);
    }
  }
}

// Registers one test per golden case and check (before main runs).
class GoldenTest : public ::testing::Test {
 public:
  GoldenTest(GoldenCase c, void (*check)(const GoldenCase&)) : c_(std::move(c)), check_(check) {}
  void TestBody() override { check_(c_); }

 private:
  GoldenCase c_;
  void (*check_)(const GoldenCase&);
};

std::string g_load_error;
size_t g_case_count = 0;

const bool kRegistered = [] {
  auto cases = load_all(&g_load_error);
  g_case_count = cases.size();
  struct Kind {
    const char* suite;
    void (*check)(const GoldenCase&);
  };
  for (Kind k : {Kind{"PassesGolden", check_golden}, Kind{"PassesFixedPoint", check_fixed_point},
                 Kind{"PassesInterp", check_interp}})
    for (const GoldenCase& c : cases)
      ::testing::RegisterTest(k.suite, c.id.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                              [c, k]() -> GoldenTest* { return new GoldenTest(c, k.check); });
  return true;
}();

TEST(PassesGoldenFiles, AllLoad) {
  EXPECT_TRUE(g_load_error.empty()) << g_load_error;
  EXPECT_GE(g_case_count, 15u) << "golden cases under " FF_GOLDEN_DIR "/passes";
}

// ---- registry and pass manager

TEST(PassesRegistry, KnowsThePassesAndTheDefaultPipeline) {
  auto names = passes::pass_names();
  for (const char* p : {"canonicalize", "matmul_sum_to_gemv", "scale_matmul_operand", "broadcast_bmm_to_mm",
                        "conv_bias_epilogue", "conv_precision", "conv_layout", "cse", "dce"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), p), names.end()) << p;
    EXPECT_EQ(passes::create_pass(p)->name(), p);
  }
  EXPECT_EQ(passes::default_pipeline(),
            (std::vector<std::string>{"conv_precision", "canonicalize", "matmul_sum_to_gemv",
                                      "scale_matmul_operand", "broadcast_bmm_to_mm", "conv_bias_epilogue",
                                      "conv_layout", "cse", "dce"}));
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

}  // namespace
}  // namespace ff
