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
#include "passes/patterns.h"

namespace ff::passes {

namespace {

class ConvBiasEpilogue : public Pass {
 public:
  std::string_view name() const override { return "conv_bias_epilogue"; }

  bool run(Graph& g) override {
    std::vector<Node*> candidates;
    for (auto& n : g.nodes())
      if (movable(g, *n)) candidates.push_back(n.get());
    for (Node* conv : candidates) {
      Value* y = conv->result();
      Value* bias = conv->operands[2].value;
      const TensorType& t = y->type;
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
  // A convolution with a per-output-channel bias whose result only pointwise code reads.
  static bool movable(const Graph& g, const Node& n) {
    if (n.op != Op::Convolution || n.operands.size() != 3 || !n.operands[2].is_value()) return false;
    const TensorType& bias = n.operands[2].value->type;
    const TensorType& out = n.result()->type;
    return bias.shape.size() == 1 && bias.shape[0] == out.shape.at(1) && bias.dtype == out.dtype &&
           feeds_only_pointwise(g, n.result());
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_bias_epilogue() { return std::make_unique<ConvBiasEpilogue>(); }

}  // namespace ff::passes
