// The torch form of IR nodes (codegen/torch/library_call.h): the Python text
// the executor compiles and `fuseforge emit` writes. Its values are checked
// against the interpreter in tests/python/test_op_registry.py; these pin the
// text of the forms with logic of their own.
#include <gtest/gtest.h>

#include "codegen/torch/library_call.h"
#include "ir/graph.h"

namespace ff {
namespace {

// The torch expression of the graph's last node over operands a0, a1, ...
std::string expr_of_last(const std::string& text) {
  auto g = parse(text);
  verify(*g);
  const Node& n = *g->nodes().back();
  std::vector<std::string> names;
  for (size_t i = 0; i < n.operands.size(); ++i) names.push_back("a" + std::to_string(i));
  return codegen::torch_expr(n, names);
}

std::string one_node(const std::string& inputs, const std::string& node) {
  return "graph @g(" + inputs + ") {\n  %0 = " + node + "\n  return %0\n}\n";
}

TEST(LibraryCall, PointwiseConvertsToTheResultDtype) {
  EXPECT_EQ(expr_of_last(one_node("%x: f16[4]", "sigmoid(%x) : f16[4]")), "torch.sigmoid(a0).to(torch.float16)");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[4]", "silu(%x) : f32[4]")),
            "torch.nn.functional.silu(a0).to(torch.float32)");
  // torch.maximum takes tensors: a literal or 0-d operand is wrapped.
  EXPECT_EQ(expr_of_last(one_node("%x: f32[4], %s: f32[]", "maximum(%x, %s) : f32[4]")),
            "torch.maximum(a0, torch.as_tensor(a1)).to(torch.float32)");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[4]", "gelu(%x) {approximate=\"tanh\"} : f32[4]")),
            "torch.nn.functional.gelu(a0, approximate='tanh')");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[]", "full(%x) : f64[2,3]")),
            "torch.full([2, 3], a0, dtype=torch.float64, device=dev)");
}

TEST(LibraryCall, ReductionsNameTheirDims) {
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3,4]", "sum(%x) {dims=[], keepdim=false} : f64[]")),
            "torch.sum(a0, dim=[0, 1, 2], keepdim=False, dtype=torch.float64)");
  // torch.prod takes one dim: innermost first, so the outer ones keep their index.
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3,4]", "prod(%x) {dims=[0, 2], keepdim=true} : f32[1,3,1]")),
            "torch.prod(torch.prod(a0, dim=2, keepdim=True, dtype=torch.float32), dim=0, keepdim=True, "
            "dtype=torch.float32)");
  EXPECT_EQ(expr_of_last(one_node("%x: f16[2,3]", "softmax(%x) {dim=1} : f32[2,3]")),
            "torch.softmax(a0, 1, dtype=torch.float32)");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3]", "softmax(%x) {dim=1} : f32[2,3]")), "torch.softmax(a0, 1, dtype=None)");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3]", "argmax(%x) {keepdim=false} : i64[]")),
            "torch.argmax(a0, dim=None, keepdim=False)");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3], %w: f32[3], %b: f32[3]",
                                  "layer_norm(%x, %w, %b) {eps=1e-05, ndims=1} : f32[2,3]")),
            "torch.nn.functional.layer_norm(a0, a0.shape[1:], a1, a2, 1e-05)");
}

TEST(LibraryCall, LayoutAndMatmul) {
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,1,3]", "squeeze(%x) {dims=[1]} : f32[2,3]")), "a0.squeeze((1,))");
  EXPECT_EQ(expr_of_last(one_node("%x: f32[2,3]", "slice(%x) {dim=1, end=3, start=1, step=1} : f32[2,2]{3,1}")),
            "torch.ops.aten.slice.Tensor(a0, 1, 1, 3, 1)");
  EXPECT_EQ(expr_of_last(one_node("%b: f32[3], %x: f32[2,4], %w: f32[4,3]", "addmm(%b, %x, %w) {beta=0.5} : f32[2,3]")),
            "torch.addmm(a0, a1, a2, beta=0.5, alpha=1)");
}

TEST(LibraryCall, OpaqueArgumentsAreRewritten) {
  const char* text = R"(graph @g(%x: f32[2,3]) {
  %0, %1 = opaque(%x) {args="[$0, 1, -inf, 'a)b']", kwargs="{'dtype': torch.float32, 'device': torch.device('cuda', 0)}", target="aten.max.dim"} : f32[2], i64[2]
  return %0
}
)";
  EXPECT_EQ(expr_of_last(text),
            "torch.ops.aten.max.dim(*[a0, 1, -float('inf'), 'a)b'], **{'dtype': torch.float32, 'device': dev})");
}

TEST(LibraryCall, OpaqueArgumentsOutsideTheGrammarAreRejected) {
  auto bad = [](const std::string& args) {
    return "graph @g(%x: f32[2]) {\n  %0 = opaque(%x) {args=\"" + args + "\", target=\"aten.foo.default\"} : f32[2]\n  return %0\n}\n";
  };
  EXPECT_THROW(expr_of_last(bad("[os.system(1)]")), IRError);
  EXPECT_THROW(expr_of_last(bad("[torch.zeros(3)]")), IRError);
  EXPECT_THROW(expr_of_last(bad("[$1]")), IRError);
  EXPECT_THROW(expr_of_last(bad("[__import__]")), IRError);
}

}  // namespace
}  // namespace ff
