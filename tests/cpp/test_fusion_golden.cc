// Golden tests of the fusion decisions: tests/golden/fusion/<case>.ir holds
//
//   // RUN: arch=90 passes=dce      <- compile options (defaults: arch=90, passes=dce;
//                                     also reductions=off, donated=a,b: a backward's
//                                     inputs handed over, those named to be written over)
//   // free-form comments
//   graph @g(...) { ... }          <- the input graph
//   // CHECK:
//   // kernel ff_reduce_..._0: %0 %1 -> %1 (over %0) | <strategy>   <- (over: the input whose memory it takes)
//   // library %2 = view(%1) : ...  <- the expected plan, one step a line
//
// Each case is registered as three tests:
//   FusionGolden.<case>  the plan printed as above equals the CHECK text;
//   FusionNvrtc.<case>   every kernel (library epilogues' too) compiles with NVRTC for sm_90;
//   FusionRun.<case>     the plan run on the CPU (kernels on the kernel
//                        emulator, library calls on the interpreter) gives the
//                        interpreter's outputs of the whole graph, on 2 random
//                        input sets (f32: rtol 2e-5, atol 2e-5; integers exactly),
//                        outputs written over inputs where the plan says so;
//                        so do conv kernels' library forms, run instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernel_emulator.h"
#include "plan_runner.h"
#include "runtime/compiler.h"

namespace ff {
namespace {

namespace fs = std::filesystem;

struct FusionCase {
  std::string id, path, input, expected;
  CompileOptions options;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

FusionCase load_case(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::vector<std::string> lines;
  for (std::string l; std::getline(buf, l);) lines.push_back(l);
  FusionCase c;
  c.path = path.string();
  c.id = path.stem().string();
  c.options.passes = {"dce"};
  c.options.arch = 90;
  if (lines.empty() || lines[0].rfind("// RUN:", 0) != 0) throw std::runtime_error(c.path + ": first line must be '// RUN: ...'");
  std::stringstream opts(lines[0].substr(7));
  for (std::string kv; opts >> kv;) {
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq), value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (key == "arch") c.options.arch = std::stoi(value);
    else if (key == "passes") {
      c.options.passes.clear();
      std::stringstream ps(value);
      for (std::string p; std::getline(ps, p, ',');) c.options.passes.push_back(p);
    } else if (key == "reductions") c.options.reductions = value != "off";
    else if (key == "donated") {  // a backward's inputs handed over, these to be written over
      c.options.release_inputs = true;
      std::stringstream names(value);
      for (std::string n; std::getline(names, n, ',');) c.options.donated.push_back(n);
    }
    else throw std::runtime_error(c.path + ": unknown RUN option '" + key + "'");
  }
  size_t check = 0;
  for (size_t i = 1; i < lines.size() && !check; ++i)
    if (trim(lines[i]) == "// CHECK:") check = i;
  if (!check) throw std::runtime_error(c.path + ": no '// CHECK:' line");
  for (size_t i = 1; i < check; ++i) c.input += lines[i] + "\n";
  for (size_t i = check + 1; i < lines.size(); ++i)
    if (!trim(lines[i]).empty()) c.expected += lines[i].substr(lines[i].rfind("// ", 0) == 0 ? 3 : 0) + "\n";
  return c;
}

// One line per step: kernels with their nodes, outputs and strategy.
std::string describe(const CompiledGraph& cg) {
  std::string out;
  for (const auto& s : cg.partition.steps) {
    if (s.kind == fusion::Step::Kind::Node) {
      out += "library " + print_node(*s.node) + "\n";
      continue;
    }
    const auto& g = cg.partition.groups[s.group];
    const auto& k = cg.kernels[s.group];
    out += "kernel " + k.name + ":";
    for (const Node* n : g.nodes) out += " %" + n->result()->name;
    out += " ->";
    // Per output of the plan's kernel (in the kernel's parameter order): the input whose memory it takes.
    const auto& over = cg.plan.kernels[s.group].over;
    for (const Value* v : g.outputs) {
      out += " %" + v->name;
      for (size_t j = 0; j < over.size(); ++j)
        if (k.outputs[j] == v->name && over[j] >= 0) out += " (over %" + k.inputs[over[j]] + ")";
    }
    // The strategy: the generator's header line after its last "; ".
    const std::string head = k.source.substr(0, k.source.find('\n'));
    if (g.kind == fusion::Group::Kind::Reduction || g.kind == fusion::Group::Kind::Pool ||
        g.kind == fusion::Group::Kind::Scan || (g.kind == fusion::Group::Kind::Conv && g.conv.direct) ||
        head.find("; transposing") != std::string::npos)
      out += " | " + head.substr(head.rfind("; ") + 2);
    out += "\n";
  }
  return out;
}

std::vector<FusionCase> load_all(std::string* error) {
  std::vector<FusionCase> cases;
  const fs::path root = fs::path(FF_GOLDEN_DIR) / "fusion";
  std::vector<fs::path> files;
  if (fs::exists(root))
    for (auto& e : fs::directory_iterator(root))
      if (e.path().extension() == ".ir") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    try {
      cases.push_back(load_case(f));
    } catch (const std::exception& e) {
      *error += std::string(e.what()) + "\n";
    }
  }
  return cases;
}

void check_plan(const FusionCase& c) {
  const auto cg = compile_graph(c.input, c.options);
  const std::string actual = describe(cg);
  EXPECT_EQ(actual, c.expected) << c.path << ": plan differs; actual, to paste after '// CHECK:':\n" << actual;
}

void check_nvrtc(const FusionCase& c) {
  const auto cg = compile_graph(c.input, c.options);
  for (const auto& k : cg.kernels) {
    const auto compiled = runtime::compile_kernel(k.source, k.name, 90);
    EXPECT_TRUE(compiled.is_cubin) << k.name << ":\n" << compiled.log;
  }
}

void check_run(const FusionCase& c) {
  if (!testing::host_compiler_available()) GTEST_SKIP() << "no host C++ compiler for the kernel emulator";
  const auto cg = compile_graph(c.input, c.options);
  const bool library_forms = !cg.partition.library_epilogues.empty();
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    const auto inputs = interp::random_inputs(*cg.plan.graph, seed);
    const auto want = interp::run(*cg.plan.graph, inputs);
    const auto got = testing::run_plan(cg, inputs);
    const std::string diff = testing::compare(got, want, 2e-5, 2e-5);
    EXPECT_EQ(diff, "") << c.path << " (seed " << seed << ")";
    if (!library_forms) continue;
    const std::string library = testing::compare(testing::run_plan(cg, inputs, true), want, 2e-5, 2e-5);
    EXPECT_EQ(library, "") << c.path << " (seed " << seed << ", conv kernels' library forms)";
  }
}

class FusionTest : public ::testing::Test {
 public:
  FusionTest(FusionCase c, void (*check)(const FusionCase&)) : c_(std::move(c)), check_(check) {}
  void TestBody() override { check_(c_); }

 private:
  FusionCase c_;
  void (*check_)(const FusionCase&);
};

std::string g_error;
size_t g_count = 0;

const bool kRegistered = [] {
  auto cases = load_all(&g_error);
  g_count = cases.size();
  struct Kind {
    const char* suite;
    void (*check)(const FusionCase&);
  };
  for (Kind k : {Kind{"FusionGolden", check_plan}, Kind{"FusionNvrtc", check_nvrtc}, Kind{"FusionRun", check_run}})
    for (const FusionCase& c : cases)
      ::testing::RegisterTest(k.suite, c.id.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                              [c, k]() -> FusionTest* { return new FusionTest(c, k.check); });
  return true;
}();

TEST(FusionGoldenFiles, AllLoad) {
  EXPECT_TRUE(g_error.empty()) << g_error;
  EXPECT_GE(g_count, 10u) << "golden cases under " FF_GOLDEN_DIR "/fusion";
}

}  // namespace
}  // namespace ff
