// broadcast_matmul_operand: a matmul whose left operand has identical rows
// (or whose right operand has identical columns) computes one row (column)
// and expands it.
//
//   %e = expand(%g) : [M,K] (%g : [1,K])  ; %y = mm(%e, %b) : [M,N]
// becomes
//   %y1 = mm(%g, %b) : [1,N] ; %x = expand(%y1) : [M,N] ; %y = copy(%x) : [M,N]
//
// The identical rows may come through permutes and pointwise ops whose other
// operands are scalars or alike along the same dim. A sum's gradient is its
// upstream gradient expanded over the summed dim, so the weight gradient of
// a linear layer before a sum is such a matmul: M identical rows, each a
// K-long dot product per column. Every row is computed as the full matmul
// computes it, so the result is the same, from an M-fold smaller GEMM (a
// GEMV, which gemv_as_reduction then takes) and one write of the result.
#include <algorithm>

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

constexpr int kMaxDepth = 8;  // producers walked back from a matmul operand

Node* insert_typed(Graph& g, Node* at, Op op, std::vector<Operand> operands, TensorType declared, Attrs attrs = {}) {
  Node* n = g.insert_before(at, op, std::move(operands), {std::move(declared)}, std::move(attrs));
  n->result()->type = infer_result_types(*n)[0];
  return n;
}

// Whether every slice of `x` along dim `d` is the same.
bool uniform(const Value* x, size_t d, int depth) {
  if (x->type.shape[d] == 1) return true;
  const Node* p = x->producer;
  if (p == nullptr || depth == 0) return false;
  if (p->op == Op::Expand) {
    const Shape& in = p->input(0)->type.shape;
    const size_t off = x->type.shape.size() - in.size();
    return d < off || in[d - off] == 1;
  }
  if (p->op == Op::Permute)
    return uniform(p->input(0), normalize_dim(p->attr_ints("dims")[d], static_cast<int64_t>(x->type.shape.size())),
                   depth - 1);
  if (op_kind(p->op) != OpKind::Pointwise || p->op == Op::Full || p->results.size() != 1) return false;
  bool tensor = false;
  for (const Operand& o : p->operands) {
    if (is_rank0(o)) continue;
    tensor = true;
    const Shape& s = o.value->type.shape;
    if (s.size() != x->type.shape.size()) {
      const size_t off = x->type.shape.size() - s.size();
      if (d >= off && s[d - off] != 1) return false;  // a lower-rank operand must be 1 (or absent) along d
    } else if (!uniform(o.value, d, depth - 1)) {
      return false;
    }
  }
  return tensor;
}

// `x` (uniform along `d`) with dim `d` cut to size 1, built before `at`.
Value* slice(Graph& g, Node* at, Value* x, size_t d) {
  Shape one = x->type.shape;
  one[d] = 1;
  if (x->type.shape[d] == 1) return x;
  Node* p = x->producer;
  if (p->op == Op::Expand) {
    Value* in = p->input(0);
    if (in->type.shape == one) return in;
    return insert_typed(g, at, Op::Expand, {Operand::of(in)}, TensorType::contiguous(x->type.dtype, one))->result();
  }
  if (p->op == Op::Permute) {
    const size_t from = normalize_dim(p->attr_ints("dims")[d], static_cast<int64_t>(one.size()));
    Value* in = slice(g, at, p->input(0), from);
    return insert_typed(g, at, Op::Permute, {Operand::of(in)}, TensorType::contiguous(x->type.dtype, one), p->attrs)
        ->result();
  }
  std::vector<Operand> operands = p->operands;
  for (Operand& o : operands)
    if (!is_rank0(o) && o.value->type.shape.size() == one.size()) o.value = slice(g, at, o.value, d);
  return g.insert_before(at, p->op, operands, {TensorType::contiguous(x->type.dtype, one)}, p->attrs)->result();
}

class BroadcastMatmulOperand final : public Pass {
 public:
  std::string_view name() const override { return "broadcast_matmul_operand"; }

  bool run(Graph& g) override {
    std::vector<Node*> matmuls;
    for (auto& n : g.nodes())
      if (n->op == Op::Mm && (uniform_rows(*n) || uniform_columns(*n))) matmuls.push_back(n.get());
    for (Node* mm : matmuls) {
      const TensorType y = mm->result()->type;
      const bool rows = uniform_rows(*mm);
      Value* a = rows ? slice(g, mm, mm->input(0), 0) : mm->input(0);
      Value* b = rows ? mm->input(1) : slice(g, mm, mm->input(1), 1);
      const Shape small = rows ? Shape{1, y.shape[1]} : Shape{y.shape[0], 1};
      Node* one =
          g.insert_before(mm, Op::Mm, {Operand::of(a), Operand::of(b)}, {TensorType::contiguous(y.dtype, small)});
      Node* wide = insert_typed(g, mm, Op::Expand, {Operand::of(one->result())}, y);
      Node* copy = g.insert_before(mm, Op::Copy, {Operand::of(wide->result())}, {y});
      g.replace_all_uses(mm->result(), copy->result());
    }
    g.erase_nodes_if([&](const Node* n) { return std::find(matmuls.begin(), matmuls.end(), n) != matmuls.end(); });
    return !matmuls.empty();
  }

 private:
  // A left operand with identical rows, more than one of them.
  static bool uniform_rows(const Node& mm) {
    const Value* a = mm.input(0);
    return a->type.shape.size() == 2 && a->type.shape[0] > 1 && uniform(a, 0, kMaxDepth);
  }
  // A right operand with identical columns, more than one of them.
  static bool uniform_columns(const Node& mm) {
    const Value* b = mm.input(1);
    return b->type.shape.size() == 2 && b->type.shape[1] > 1 && uniform(b, 1, kMaxDepth);
  }
};

}  // namespace

std::unique_ptr<Pass> make_broadcast_matmul_operand() { return std::make_unique<BroadcastMatmulOperand>(); }

}  // namespace ff::passes
