// Passes stay linear in the graph's size: the whole-graph walks a pass makes
// (Graph::walks: finding users, replacing uses, inserting and erasing nodes)
// do not grow with the number of repeated blocks, as in a network of many
// layers or a loop unrolled over many steps.
#include <gtest/gtest.h>

#include <string>
#include <unordered_set>

#include "passes/pass.h"

namespace ff {
namespace {

// `steps` steps of h = tanh(h @ t(w)): every step reads the weight through a
// permute of its own, as an unrolled loop's trace repeats it.
std::string permuted_weight_steps(int steps) {
  std::string text = "graph @g(%h0: f32[2,2048], %w: f32[2048,2048] param) {\n";
  for (int i = 0; i < steps; ++i) {
    const std::string s = std::to_string(i);
    text += "  %t" + s + " = permute(%w) {dims=[1, 0]} : f32[2048,2048]{1,2048}\n";
    text += "  %m" + s + " = mm(%h" + s + ", %t" + s + ") : f32[2,2048]\n";
    text += "  %h" + std::to_string(i + 1) + " = tanh(%m" + s + ") : f32[2,2048]\n";
  }
  return text + "  return %h" + std::to_string(steps) + "\n}\n";
}

// `steps` steps of h = view(relu(view(exp(h)))): every relu reads a view of
// the kernel result before it, as a norm's activation reads the norm's view back.
std::string viewed_relu_steps(int steps) {
  std::string text = "graph @g(%h0: f32[4,8]) {\n";
  for (int i = 0; i < steps; ++i) {
    const std::string s = std::to_string(i);
    text += "  %e" + s + " = exp(%h" + s + ") : f32[4,8]\n";
    text += "  %v" + s + " = view(%e" + s + ") : f32[32]\n";
    text += "  %r" + s + " = relu(%v" + s + ") : f32[32]\n";
    text += "  %h" + std::to_string(i + 1) + " = view(%r" + s + ") : f32[4,8]\n";
  }
  return text + "  return %h" + std::to_string(steps) + "\n}\n";
}

struct PassRun {
  int64_t walks = 0;
  int nodes = 0;
  int weights_read = 0;  // distinct right operands of the matmuls
};

PassRun run_pass(const std::string& pass, const std::string& text) {
  auto g = parse(text);
  verify(*g);
  auto p = passes::create_pass(pass);
  p->configure(passes::PassOptions{});
  const int64_t before = g->walks();
  EXPECT_TRUE(p->run(*g));
  verify(*g);
  std::unordered_set<const Value*> weights;
  for (auto& n : g->nodes())
    if (n->op == Op::Mm) weights.insert(n->input(1));
  return {g->walks() - before, static_cast<int>(g->nodes().size()), static_cast<int>(weights.size())};
}

TEST(PassCost, CseWalksTheGraphOnceWhateverTheRepeats) {
  const PassRun few = run_pass("cse", permuted_weight_steps(8));
  const PassRun many = run_pass("cse", permuted_weight_steps(32));
  EXPECT_EQ(few.weights_read, 1);  // every step reads the first step's permute
  EXPECT_EQ(many.weights_read, 1);
  EXPECT_EQ(many.walks, few.walks);
}

TEST(PassCost, SplitGemmKRewritesEveryMatmulInBoundedWalks) {
  // [2, 2048] @ [2048, 2048]: 16 output tiles, K long enough for 8 slices.
  const PassRun few = run_pass("split_gemm_k", permuted_weight_steps(8));
  const PassRun many = run_pass("split_gemm_k", permuted_weight_steps(32));
  EXPECT_EQ(few.nodes, 8 * 7);  // per step: permute, views, permute, bmm, sum, tanh
  EXPECT_EQ(many.nodes, 32 * 7);
  EXPECT_EQ(many.walks, few.walks);
}

TEST(PassCost, PointwiseBeforeViewMovesEveryStepInBoundedWalks) {
  const PassRun few = run_pass("pointwise_before_view", viewed_relu_steps(8));
  const PassRun many = run_pass("pointwise_before_view", viewed_relu_steps(32));
  auto g = parse(viewed_relu_steps(32));
  auto p = passes::create_pass("pointwise_before_view");
  p->configure(passes::PassOptions{});
  p->run(*g);
  for (auto& n : g->nodes())
    if (n->op == Op::Relu) EXPECT_EQ(n->result()->type.shape, (Shape{4, 8}));  // every relu moved before its view
  EXPECT_EQ(many.walks, few.walks);
}

}  // namespace
}  // namespace ff
