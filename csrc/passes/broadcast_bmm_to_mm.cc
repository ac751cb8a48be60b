// broadcast_bmm_to_mm: a batched matmul against one matrix broadcast over the
// batch becomes a single mm over the batch's rows.
//
//   %e = expand(%w) : [B,K,N]  (%w : [K,N] or [1,K,N])
//   %y = bmm(%a, %e) : [B,M,N]
// becomes
//   %a2 = view(%a) : [B*M,K] ; %y2 = mm(%a2, %w2) : [B*M,N] ; %y = view(%y2) : [B,M,N]
//
// torch.export lowers `x @ W` with a non-contiguous 3-D x (e.g. attention's
// transposed input projection) to expand + bmm; eager folds it into one mm
// after a reshape (a copy when x's rows do not merge), which cuBLAS runs much
// faster than B small GEMMs. The view here has the same rule: alias or copy.

#include "passes/pass.h"

namespace ff::passes {

namespace {

class BroadcastBmmToMm : public Pass {
 public:
  std::string_view name() const override { return "broadcast_bmm_to_mm"; }

  bool run(Graph& g) override {
    std::vector<Node*> rewritten;
    for (auto& n : g.nodes())
      if (broadcast_matrix(*n) != nullptr) rewritten.push_back(n.get());
    for (Node* n : rewritten) {  // inserting invalidates iteration over g.nodes()
      Value* matrix = broadcast_matrix(*n);
      const TensorType& a = n->input(0)->type;
      const TensorType& y = n->result()->type;
      const int64_t rows = a.shape[0] * a.shape[1];
      Node* a2 = view(g, n, n->input(0), {rows, a.shape[2]});
      if (matrix->type.shape.size() == 3)
        matrix = view(g, n, matrix, {matrix->type.shape[1], matrix->type.shape[2]})->result();
      Node* mm = g.insert_before(n, Op::Mm, {Operand::of(a2->result()), Operand::of(matrix)},
                                 {TensorType::contiguous(y.dtype, {rows, y.shape[2]})});
      Node* back = g.insert_before(n, Op::View, {Operand::of(mm->result())}, {y});
      g.replace_all_uses(n->result(), back->result());
    }
    if (rewritten.empty()) return false;
    g.erase_nodes(rewritten);
    return true;
  }

 private:
  // For bmm(a, expand(w)) with w one [K,N] matrix (or [1,K,N]) of a's dtype: w.
  static Value* broadcast_matrix(const Node& n) {
    if (n.op != Op::Bmm || !n.operands[0].is_value() || !n.operands[1].is_value()) return nullptr;
    const Node* expand = n.input(1)->producer;
    if (expand == nullptr || expand->op != Op::Expand) return nullptr;
    Value* w = expand->input(0);
    const Shape& ws = w->type.shape;
    const bool matrix = ws.size() == 2 || (ws.size() == 3 && ws[0] == 1);
    const TensorType& y = n.result()->type;
    const bool contiguous_result = y.strides == contiguous_strides(y.shape);  // what the final view yields
    return matrix && contiguous_result && w->type.dtype == n.input(0)->type.dtype ? w : nullptr;
  }

  static Node* view(Graph& g, Node* before, Value* x, Shape shape) {
    Node* v = g.insert_before(before, Op::View, {Operand::of(x)}, {TensorType::contiguous(x->type.dtype, shape)});
    v->result()->type = infer_result_types(*v).at(0);  // alias strides when the layout allows
    return v;
  }
};

}  // namespace

std::unique_ptr<Pass> make_broadcast_bmm_to_mm() { return std::make_unique<BroadcastBmmToMm>(); }

}  // namespace ff::passes
