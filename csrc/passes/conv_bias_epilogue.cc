// conv_bias_epilogue: moves a convolution's bias into the pointwise code after it.
//
//   %y = convolution(%x, %w, %b) ; %z = <pointwise>(%y, ...)
// becomes
//   %c = convolution(%x, %w) ; %bv = view(%b) : [C,1,..,1] ; %y = add(%c, %bv)
//
// cuDNN adds a bias in a separate pass over the output; as a pointwise add it
// fuses into the kernel that already reads the output. Done only when every
// user of the result is pointwise, so the add always lands in an existing kernel.
#include <algorithm>

#include "passes/pass.h"

namespace ff::passes {

namespace {

class ConvBiasEpilogue : public Pass {
 public:
  std::string_view name() const override { return "conv_bias_epilogue"; }

  bool run(Graph& g) override {
    std::vector<Node*> candidates;
    for (auto& n : g.nodes())
      if (n->op == Op::Convolution && n->operands.size() == 3 && n->operands[2].is_value() && fusible_users(g, *n))
        candidates.push_back(n.get());
    for (Node* conv : candidates) {
      Value* y = conv->result();
      Value* bias = conv->operands[2].value;
      const TensorType& t = y->type;
      if (bias->type.shape.size() != 1 || bias->type.shape[0] != t.shape.at(1) || bias->type.dtype != t.dtype) continue;
      Node* bare = g.insert_before(conv, Op::Convolution, {conv->operands[0], conv->operands[1]}, {t}, conv->attrs);
      Shape per_channel(t.shape.size() - 1, 1);
      per_channel[0] = t.shape[1];
      Node* view = g.insert_before(conv, Op::View, {Operand::of(bias)}, {TensorType::contiguous(t.dtype, per_channel)});
      Node* add = g.insert_before(conv, Op::Add, {Operand::of(bare->result()), Operand::of(view->result())}, {t});
      g.replace_all_uses(y, add->result());
    }
    if (candidates.empty()) return false;
    g.erase_nodes_if([&](const Node* n) {
      return std::find(candidates.begin(), candidates.end(), n) != candidates.end();
    });
    return true;
  }

 private:
  static bool fusible_users(const Graph& g, const Node& conv) {
    if (g.is_graph_output(conv.result())) return false;
    auto users = g.users(conv.result());
    if (users.empty()) return false;
    for (const Node* u : users)
      if (op_kind(u->op) != OpKind::Pointwise) return false;
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_bias_epilogue() { return std::make_unique<ConvBiasEpilogue>(); }

}  // namespace ff::passes
