// Tests of the kernel plan (csrc/plan/).
//
// Golden cases live in tests/golden/plan/<case>.ir (format: golden.h). The
// RUN line holds compile flags (ff-opt --plan's: --arch=N --gemm=POLICY --conv=POLICY
// --precision=P --autotune); each case is registered as
//   PlanGolden.<case>     the printed plan of the compiled input equals CHECK;
//   PlanRoundTrip.<case>  CHECK parses and prints back unchanged;
//   PlanInvariants.<case> the compiled plan keeps the rules every walker relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <unordered_set>

#include "golden.h"
#include "pipeline/compile.h"
#include "plan/plan.h"

namespace ff {
namespace {

using testing::GoldenCase;
using Role = plan::Buffer::Role;
using Kind = plan::Step::Kind;

CompiledGraph compile_case(const GoldenCase& c) { return compile_graph(c.input, parse_compile_flags(c.run)); }

void check_golden(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  const std::string actual = plan::print(compile_case(c).plan);
  if (actual != c.expected)
    ADD_FAILURE() << "the plan of " << c.path << " (flags '" << c.run << "') differs.\n"
                  << "diff (- expected, + actual):\n"
                  << testing::line_diff(c.expected, actual) << "actual plan, to paste after '// CHECK:':\n"
                  << actual;
}

void check_round_trip(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  const std::string again = plan::print(plan::parse(c.expected));
  EXPECT_EQ(again, c.expected) << testing::line_diff(c.expected, again);
}

std::vector<int> reads(const plan::Plan& p, const plan::Step& s) {
  std::vector<int> out;
  if (s.kind == Kind::Launch) {
    for (const auto& in : p.kernels[s.kernel].inputs) out.push_back(in.memory);
    for (int b : p.kernels[s.kernel].scalars) out.push_back(b);
  } else if (s.kind != Kind::Free) {
    for (const auto& a : s.operands)
      if (a.is_buffer()) out.push_back(p.memory_of(a.buffer));
  }
  return out;
}
std::vector<int> writes(const plan::Plan& p, const plan::Step& s) {
  if (s.kind == Kind::Launch) return p.kernels[s.kernel].outputs;
  return s.kind == Kind::Free ? std::vector<int>{} : s.results;
}

// A conv kernel's library form computes what the kernel does from what it
// reads: the conv's call into an interior buffer that only it writes, the
// launch of a kernel reading that buffer (re-laid out: a library call made
// it) and what the conv kernel reads, writing the conv kernel's outputs; then
// the buffer's free.
void check_library_form(const plan::Plan& p, const plan::Kernel& k, std::vector<int>& launches) {
  SCOPED_TRACE(k.name);
  EXPECT_EQ(k.kind, fusion::Group::Kind::Conv);
  ASSERT_EQ(k.library_steps.size(), 3u);
  const plan::Step &call = k.library_steps[0], &launch = k.library_steps[1], &free = k.library_steps[2];
  ASSERT_EQ(call.kind, Kind::Call);
  ASSERT_EQ(launch.kind, Kind::Launch);
  ASSERT_EQ(free.kind, Kind::Free);
  EXPECT_EQ(call.node->op, Op::Convolution);
  ASSERT_EQ(call.results.size(), 1u);
  const int conv = call.results[0];
  EXPECT_EQ(p.buffers[conv].role, Role::Interior);
  EXPECT_EQ(free.results, std::vector<int>{conv});
  launches[launch.kernel]++;
  const plan::Kernel& epilogue = p.kernels[launch.kernel];
  EXPECT_EQ(epilogue.outputs, k.outputs);
  EXPECT_TRUE(epilogue.library_steps.empty());
  std::set<int> kernel_reads;
  for (const auto& in : k.inputs) kernel_reads.insert(in.memory);
  for (int b : reads(p, call)) EXPECT_TRUE(kernel_reads.count(b)) << "the conv call reads %" << p.buffers[b].name;
  bool reads_conv = false;
  for (const auto& in : epilogue.inputs) {
    if (in.memory == conv) {
      reads_conv = true;
      EXPECT_TRUE(in.relayout);
    } else {
      EXPECT_TRUE(kernel_reads.count(in.memory)) << "the epilogue reads %" << p.buffers[in.memory].name;
    }
  }
  EXPECT_TRUE(reads_conv);
}

// What the walkers rely on: every read buffer holds a value (an input, a kept
// prepared value, or written earlier and not yet freed); each temporary is
// freed once, after its last read; prepare reads only weights and writes only
// prepared values; inputs are freed only where the caller hands them over
// (--release-inputs), then each one no output holds, once; aliases view a
// non-alias and are never written; each
// kernel is launched exactly once, by a section or by a conv kernel's library
// form (check_library_form).
void check_invariants(const GoldenCase& c) {
  SCOPED_TRACE(c.path);
  const CompiledGraph cg = compile_case(c);
  const plan::Plan& p = cg.plan;
  const bool releases = parse_compile_flags(c.run).release_inputs;
  auto role = [&](int b) { return p.buffers[b].role; };
  std::set<int> live;
  for (int b : p.inputs) live.insert(b);
  std::vector<int> launches(p.kernels.size(), 0);
  std::multiset<int> freed;
  for (const plan::Step& s : p.prepare) {
    for (int b : reads(p, s)) {
      EXPECT_TRUE(role(b) == Role::Param || role(b) == Role::State || role(b) == Role::Const ||
                  role(b) == Role::Prepared)
          << "prepare reads %" << p.buffers[b].name;
      EXPECT_TRUE(live.count(b)) << "prepare reads %" << p.buffers[b].name << " before it is written";
    }
    for (int b : writes(p, s)) {
      EXPECT_EQ(role(b), Role::Prepared) << "%" << p.buffers[b].name;
      live.insert(b);
    }
    if (s.kind == Kind::Launch) launches[s.kernel]++;
    if (s.kind == Kind::Free)
      for (int b : s.results) live.erase(b), freed.insert(b);
  }
  for (size_t i = 0; i < p.run.size(); ++i) {
    const plan::Step& s = p.run[i];
    for (int b : reads(p, s)) EXPECT_TRUE(live.count(b)) << "run step " << i << " reads %" << p.buffers[b].name;
    for (int b : writes(p, s)) {
      EXPECT_TRUE(role(b) == Role::Temp || role(b) == Role::Output) << "%" << p.buffers[b].name;
      live.insert(b);
    }
    if (s.kind == Kind::Launch) launches[s.kernel]++;
    if (s.kind != Kind::Free) continue;
    for (int b : s.results) {
      EXPECT_TRUE(role(b) == Role::Temp || (releases && role(b) == Role::Input)) << "run frees %" << p.buffers[b].name;
      for (size_t j = i + 1; j < p.run.size(); ++j)
        for (int r : reads(p, p.run[j])) EXPECT_NE(r, b) << "%" << p.buffers[b].name << " is read after its free";
      live.erase(b);
      freed.insert(b);
    }
  }
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].role == Role::Temp) EXPECT_EQ(freed.count(static_cast<int>(b)), 1u) << "%" << p.buffers[b].name;
    const bool returned = std::count(p.outputs.begin(), p.outputs.end(), static_cast<int>(b)) != 0;
    if (releases && p.buffers[b].role == Role::Input && !returned)
      EXPECT_EQ(freed.count(static_cast<int>(b)), 1u) << "%" << p.buffers[b].name;
    if (p.buffers[b].role == Role::Alias) {
      EXPECT_GE(p.buffers[b].alias_of, 0);
      EXPECT_NE(role(p.buffers[b].alias_of), Role::Alias);
    }
  }
  for (int o : p.outputs) EXPECT_TRUE(live.count(o)) << "output %" << p.buffers[o].name;
  for (const plan::Kernel& k : p.kernels)
    if (!k.library_steps.empty()) check_library_form(p, k, launches);
  for (int n : launches) EXPECT_EQ(n, 1);
}

std::string g_load_error;
size_t g_case_count = 0;

const bool kRegistered = [] {
  auto cases = testing::load_golden("plan", &g_load_error);
  g_case_count = cases.size();
  testing::register_golden("PlanGolden", cases, check_golden);
  testing::register_golden("PlanRoundTrip", cases, check_round_trip);
  testing::register_golden("PlanInvariants", cases, check_invariants);
  return true;
}();

TEST(PlanGoldenFiles, AllLoadAndCoverEveryStepAndKernelKind) {
  EXPECT_TRUE(g_load_error.empty()) << g_load_error;
  EXPECT_GE(g_case_count, 7u);
  std::set<std::string> seen;
  for (const auto& c : testing::load_golden("plan", &g_load_error)) {
    const plan::Plan p = compile_case(c).plan;
    for (const auto* section : {&p.prepare, &p.run})
      for (const auto& s : *section) seen.insert(std::string(plan::step_kind_name(s.kind)));
    for (const auto& k : p.kernels) {
      seen.insert(std::string(fusion::group_kind_name(k.kind)) + " kernel");
      if (!k.library_steps.empty()) seen.insert("library form");
    }
    for (const auto& b : p.buffers) seen.insert(std::string(plan::role_name(b.role)) + " buffer");
  }
  for (const char* what : {"launch", "call", "view", "free", "pointwise kernel", "gemm kernel", "alias buffer",
                           "prepared buffer", "scalar buffer", "state buffer", "output buffer", "library form"})
    EXPECT_TRUE(seen.count(what)) << "no golden plan has a " << what;
}

TEST(PlanText, ParseErrorsNameTheLine) {
  const std::string good = R"(plan @g {
  buffers:
    %x: f32[4] input
    %1: f32[4] output
  prepare:
  run:
    call %1 = exp(%x) : f32[4]
  return %1
}
)";
  EXPECT_EQ(plan::print(plan::parse(good)), good);
  auto fails = [](const std::string& text, const std::string& what) {
    try {
      plan::parse(text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const IRError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  fails(with("input", "inbox"), "plan line 3: unknown buffer role 'inbox'");
  fails(with("exp(%x)", "exp(%y)"), "use of undefined value");
  fails(with("call %1", "launch @k"), "launch of unknown kernel");
  fails(with("  return %1\n", ""), "expected 'return'");
  fails(with("%1: f32[4] output", "%1: f32[5] output"), "another type than declared");
  fails(with("  run:\n", "  run:\n    free %z\n"), "unknown buffer '%z'");
  fails(good + "x\n", "unexpected text after the plan");
}

TEST(PlanBuild, GridStrideKernelsGetOneBlockPerPassAndAnEmptyTensorNone) {
  const CompiledGraph big = compile_graph(R"(graph @g(%x: f32[1024,1024]) {
  %0 = exp(%x) : f32[1024,1024]
  return %0
})");
  ASSERT_EQ(big.plan.kernels.size(), 1u);
  const plan::Kernel& k = big.plan.kernels[0];
  // 2^20 elements, 4-wide items of 16 bytes, 256 threads x 1 item per block.
  EXPECT_EQ(k.grid, (std::array<int64_t, 3>{1024, 1, 1}));
  EXPECT_EQ(k.block, (std::array<int64_t, 3>{256, 1, 1}));
  // Half-precision items are 8 bytes, and a broadcast operand is re-read by
  // every thread: 4 items per thread.
  const CompiledGraph narrow = compile_graph(R"(graph @g(%x: f16[1024,1024]) {
  %0 = neg(%x) : f16[1024,1024]
  return %0
})");
  const CompiledGraph broadcast = compile_graph(R"(graph @g(%x: f32[1024,1024], %row: f32[1024]) {
  %0 = unsqueeze(%row) {dim=0} : f32[1,1024]
  %1 = add(%x, %0) : f32[1024,1024]
  return %1
})");
  for (const CompiledGraph* cg : {&narrow, &broadcast}) {
    ASSERT_EQ(cg->plan.kernels.size(), 1u);
    EXPECT_EQ(cg->plan.kernels[0].grid, (std::array<int64_t, 3>{256, 1, 1}));
  }
  const CompiledGraph empty = compile_graph(R"(graph @g(%x: f32[0,8]) {
  %0 = exp(%x) : f32[0,8]
  return %0
})");
  EXPECT_EQ(empty.plan.kernels.at(0).grid[0], 0);
}

TEST(PlanBuild, ViewsAreAliasesOnlyWhereKernelsAloneReadThem) {
  // %0 -> %1 -> kernel: both aliases of %x. %2 feeds a library call, %3 is a
  // reshape of a transposed value (it copies), %5 is an output: all three run.
  const CompiledGraph cg = compile_graph(R"(graph @g(%x: f32[4,8], %y: f32[8,4]) {
  %0 = view(%x) : f32[1,4,8]
  %1 = permute(%0) {dims=[2, 0, 1]} : f32[8,1,4]{1,32,8}
  %2 = permute(%x) {dims=[1, 0]} : f32[8,4]{1,8}
  %3 = view(%2) : f32[32]
  %4 = mm(%2, %x) : f32[8,8]
  %5 = view(%y) : f32[1,8,4]
  %6 = exp(%1) : f32[8,1,4]
  %7 = exp(%3) : f32[32]
  return %6, %7, %4, %5
})");
  const plan::Plan& p = cg.plan;
  auto role = [&](const char* name) { return std::string(plan::role_name(p.buffers[p.find(name)].role)); };
  EXPECT_EQ(role("0"), "alias");
  EXPECT_EQ(role("1"), "alias");
  EXPECT_EQ(p.buffers[p.find("1")].alias_of, p.find("x"));
  EXPECT_EQ(role("2"), "temp");
  EXPECT_EQ(role("3"), "temp");
  EXPECT_EQ(role("5"), "output");
  int views = 0;
  for (const auto& s : p.run) views += s.kind == Kind::View;
  EXPECT_EQ(views, 3) << plan::print(p);
}

TEST(PlanBuild, AConvKernelsLibraryFormIsThePlanWithoutConvKernels) {
  // The conv's call, the epilogue's kernel and the free are what the run
  // section holds where the conv is no kernel: the same steps, the same code
  // (but for the engine conv_engine chose, which the conv's call prints).
  const char* text = R"(graph @g(%x: f32[2,16,10,10]{1600,1,160,16}, %w: f32[32,16,3,3]{144,1,48,16} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], fp32_precision="ieee", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,32,8,8]{2048,1,256,32}
  %1 = sigmoid(%0) : f32[2,32,8,8]{2048,1,256,32}
  %2 = mul(%0, %1) : f32[2,32,8,8]
  return %2
})";
  const CompiledGraph fused = compile_graph(text, parse_compile_flags("--arch=90 --conv=always"));
  const CompiledGraph off = compile_graph(text, parse_compile_flags("--arch=90 --conv=off"));
  const plan::Plan &p = fused.plan, &q = off.plan;
  ASSERT_EQ(p.kernels.size(), 2u) << plan::print(p);
  ASSERT_EQ(q.kernels.size(), 1u) << plan::print(q);
  EXPECT_EQ(p.kernels[0].kind, fusion::Group::Kind::Conv);
  ASSERT_EQ(p.run.size(), 1u) << plan::print(p);
  const auto& library = p.kernels[0].library_steps;
  ASSERT_EQ(library.size(), q.run.size()) << plan::print(p);
  for (size_t i = 0; i < library.size(); ++i) {
    const std::regex engine("engine=\"[a-z_]+\", ");
    std::string step = std::regex_replace(plan::print_step(p, library[i]), engine, "");
    const std::string epilogue = p.kernels[1].name, unfused = q.kernels[0].name;
    if (const size_t at = step.find(epilogue); at != std::string::npos) step.replace(at, epilogue.size(), unfused);
    EXPECT_EQ(step, std::regex_replace(plan::print_step(q, q.run[i]), engine, ""));
  }
  EXPECT_EQ(p.kernels[1].compile_key(), q.kernels[0].compile_key());
  // Without an epilogue there is no library form: the conv alone runs op by op.
  const CompiledGraph alone =
      compile_graph(R"(graph @g(%x: f32[2,16,10,10]{1600,1,160,16}, %w: f32[32,16,3,3]{144,1,48,16} param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], fp32_precision="ieee", groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,32,8,8]{2048,1,256,32}
  return %0
})",
                    parse_compile_flags("--arch=90 --conv=always"));
  ASSERT_EQ(alone.plan.kernels.size(), 1u);
  EXPECT_TRUE(alone.plan.kernels[0].library_steps.empty());
}

TEST(PlanBuild, OutputsAndOpaqueCallsStayOutOfPrepare) {
  // w * 2 depends only on the weight but is an output (the caller may change
  // it in place): it is computed every call, as is the random opaque op.
  const CompiledGraph cg = compile_graph(R"(graph @g(%x: f32[4], %w: f32[4] param) {
  %0 = mul(%w, 2.0) : f32[4]
  %1 = opaque(%w) {args="[$0]", target="aten.rand_like.default"} : f32[4]
  %2 = add(%x, %1) : f32[4]
  return %0, %2
})");
  EXPECT_TRUE(cg.plan.prepare.empty()) << plan::print(cg.plan);
}

}  // namespace
}  // namespace ff
