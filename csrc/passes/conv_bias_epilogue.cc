// conv_bias_epilogue: moves a convolution's bias into the pointwise code after it.
//
//   %y = convolution(%x, %w, %b) ; %z = <pointwise>(%y, ...)
// becomes
//   %c = convolution(%x, %w) ; %bv = view(%b) : [C,1,..,1] ; %y = add(%c, %bv)
//
// cuDNN adds a bias in a separate pass over the output; as a pointwise add it
// fuses into the kernel that already reads the output. Done only when every
// user of the result is pointwise or a reduction (whose kernel takes the add
// in as its prologue), so the add always lands in an existing kernel.

#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/split_long_reduction.h"

namespace ff::passes {

namespace {

// Whether every user of `v` (a convolution's result) is pointwise or a
// reduction. For a 2-D convolution only reductions over the channels, or
// ones split_long_reduction splits: the add makes conv_layout run it NHWC,
// where a reduction over the channels reads rows of unit stride and a batch
// norm's statistics over N, H, W partials of many columns, but another over
// N, H, W would have few columns, and softmax, log_softmax or layer_norm
// would write their NCHW result across rows (uncoalesced).
bool feeds_only_fusible(const Graph& g, const Value* v) {
  if (g.is_graph_output(v)) return false;
  auto users = g.users(v);
  if (users.empty()) return false;
  const bool nhwc_next = v->type.shape.size() == 4;
  for (const Node* u : users) {
    if (op_kind(u->op) == OpKind::Pointwise) continue;
    if (op_kind(u->op) != OpKind::Reduction) return false;
    if (!nhwc_next) continue;
    const bool normalization = u->op == Op::Softmax || u->op == Op::LogSoftmax || u->op == Op::LayerNorm;
    const bool over_channels = u->has_attr("dims") && u->attr_ints("dims") == std::vector<int64_t>{1};
    if (normalization || !(over_channels || splits_into_partials(*u))) return false;
  }
  return true;
}

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
    g.erase_nodes(candidates);
    return true;
  }

 private:
  // A convolution with a per-output-channel bias whose result only pointwise
  // code and reductions read.
  static bool movable(const Graph& g, const Node& n) {
    if (n.op != Op::Convolution || n.operands.size() != 3 || !n.operands[2].is_value()) return false;
    const TensorType& bias = n.operands[2].value->type;
    const TensorType& out = n.result()->type;
    return bias.shape.size() == 1 && bias.shape[0] == out.shape.at(1) && bias.dtype == out.dtype &&
           feeds_only_fusible(g, n.result());
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_bias_epilogue() { return std::make_unique<ConvBiasEpilogue>(); }

}  // namespace ff::passes
