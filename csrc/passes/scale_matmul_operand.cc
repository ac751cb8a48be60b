// scale_matmul_operand: a scalar scale of a matmul's result moves onto its
// smaller operand.
//
//   %y = bmm(%q, %kt) : [B,M,N] ; %s = mul(%y, c)      (or div(%y, c))
// becomes
//   %qs = mul(%q, c) : [B,M,K] ; %s = bmm(%qs, %kt)
//
// when an operand has fewer elements than the result (attention's scores are
// [B,M,N] with N >> head size K): the scaling pass over the result, a full
// read and write of it, becomes one over the operand, usually fused into
// whatever produces the operand.
//
// Accuracy: (c*a)@b equals c*(a@b) up to rounding. For f32/f64 any scalar is
// moved (a rounding-level change, as canonicalize's reassociation); for
// f16/bf16 only a power-of-two literal, where both forms are exact.
#include <algorithm>

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

class ScaleMatmulOperand : public Pass {
 public:
  std::string_view name() const override { return "scale_matmul_operand"; }

  bool run(Graph& g) override {
    std::vector<std::pair<Node*, Node*>> moves;  // (scale, matmul)
    for (auto& n : g.nodes())
      if (Node* mm = movable(g, *n)) moves.emplace_back(n.get(), mm);
    for (auto [scale, mm] : moves) {
      const size_t side = smaller_operand(*mm);
      Value* operand = mm->input(side);
      std::vector<Operand> operands = scale->operands;
      operands[0] = Operand::of(operand);
      Node* scaled = g.insert_before(mm, scale->op, operands,
                                     {TensorType::contiguous(operand->type.dtype, operand->type.shape)}, scale->attrs);
      mm->operands[side] = Operand::of(scaled->result());  // the product, and any views of it, are now scaled
      g.replace_all_uses(scale->result(), scale->input(0));
    }
    if (moves.empty()) return false;
    g.erase_nodes_if(
        [&](const Node* n) { return std::any_of(moves.begin(), moves.end(), [&](auto& m) { return m.first == n; }); });
    return true;
  }

 private:
  // For mul(p, c) or div(p, c), c a literal or 0-d value and p a matmul's
  // product (or a view of it) that nothing else reads, with an operand
  // smaller than the product: the matmul.
  static Node* movable(const Graph& g, const Node& n) {
    if ((n.op != Op::Mul && n.op != Op::Div) || n.operands.size() != 2 || !n.operands[0].is_value()) return nullptr;
    const Operand& c = n.operands[1];
    if (!is_rank0(c)) return nullptr;
    if (!(n.result()->type == n.input(0)->type)) return nullptr;  // the scale's readers can take its input instead
    Value* y = n.input(0);
    while (true) {
      if (g.users(y).size() != 1 || g.is_graph_output(y) || y->producer == nullptr) return nullptr;
      Node* p = y->producer;
      if (p->op == Op::Mm || p->op == Op::Bmm) break;
      // A one-operand layout op (not cat: its other operands would stay unscaled).
      if (op_kind(p->op) != OpKind::Layout || p->operands.size() != 1 || !p->operands[0].is_value()) return nullptr;
      y = p->input(0);
    }
    Node* mm = y->producer;
    const DType dt = y->type.dtype;
    if (!reassociates(dt) && !(is_floating(dt) && exact_scale(c))) return nullptr;
    return numel(mm->input(smaller_operand(*mm))->type.shape) < numel(y->type.shape) ? mm : nullptr;
  }

  static bool exact_scale(const Operand& c) {
    if (c.is_value()) return false;
    const double v = std::fabs(c.literal.as_double());
    return is_pow2(v) && v >= 1.0 / 1024 && v <= 1024;
  }

  static size_t smaller_operand(const Node& mm) {
    return numel(mm.input(1)->type.shape) < numel(mm.input(0)->type.shape) ? 1 : 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_scale_matmul_operand() { return std::make_unique<ScaleMatmulOperand>(); }

}  // namespace ff::passes
