// gemv_as_reduction: a matrix-vector product (an mm or bmm whose right operand
// has one column) becomes a sum over the rows of an elementwise product.
//
//   %y = mm(%a, %v) : [M,1]    (%v : [K,1])
// becomes
//   %r = view(%v) : [1,K] ; %p = mul(%a, %r) : [M,K] ; %y = sum(%p) {dims=[1], keepdim=true} : [M,1]
//
// and bmm alike per batch ([B,K,1] viewed as [B,1,K]). The reduction scheduler
// then makes one kernel that reads %a once, together with the pointwise work
// that produces %a (a cast, a scale) and the work that reads %y, where a
// library GEMV needs %a written out first and its result read back.
// matmul_sum_to_gemv makes such products from a sum over a GEMM's columns.
//
// Only with rows enough for a block per row to fill the GPU (kMinRows): with
// fewer, cuBLAS's GEMV, which splits K across blocks, is faster, and the
// reduction scheduler would leave the sum a library call after a materialized
// product. f32/f64 only: in f16/bf16 the product's rounding would differ from
// a GEMV's f32 accumulation.
#include <utility>

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

// Rows (batch x M) below which a GEMV stays a library call: a few times the SM
// count of the GPUs we target, so that a block per row fills them.
constexpr int64_t kMinRows = 256;

class GemvAsReduction : public Pass {
 public:
  std::string_view name() const override { return "gemv_as_reduction"; }

  bool run(Graph& g) override {
    std::vector<Node*> rewritten;
    for (auto& n : g.nodes())
      if (is_gemv(*n)) rewritten.push_back(n.get());
    for (Node* n : rewritten) {  // inserting invalidates iteration over g.nodes()
      Value* a = n->input(0);
      Value* v = n->input(1);
      const TensorType& y = n->result()->type;
      Shape row = v->type.shape;  // [.., K, 1] -> [.., 1, K]
      std::swap(row[row.size() - 2], row[row.size() - 1]);
      Value* r = g.insert_before(n, Op::View, {Operand::of(v)}, {TensorType::contiguous(y.dtype, row)})->result();
      Value* p = g.insert_before(n, Op::Mul, {Operand::of(a), Operand::of(r)},
                                 {TensorType::contiguous(y.dtype, a->type.shape)})
                     ->result();
      const int64_t last = static_cast<int64_t>(y.shape.size()) - 1;
      Node* sum = g.insert_before(n, Op::Sum, {Operand::of(p)}, {TensorType::contiguous(y.dtype, y.shape)},
                                  {{"dims", std::vector<int64_t>{last}}, {"keepdim", true}});
      g.replace_all_uses(n->result(), sum->result());
    }
    if (rewritten.empty()) return false;
    g.erase_nodes(rewritten);
    return true;
  }

 private:
  static bool is_gemv(const Node& n) {
    if (n.op != Op::Mm && n.op != Op::Bmm) return false;
    if (!n.operands[0].is_value() || !n.operands[1].is_value()) return false;
    const TensorType& a = n.input(0)->type;
    const TensorType& v = n.input(1)->type;
    const TensorType& y = n.result()->type;
    if (!reassociates(y.dtype) || a.dtype != y.dtype || v.dtype != y.dtype) return false;
    if (v.shape.back() != 1 || y.strides != contiguous_strides(y.shape)) return false;
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < y.shape.size(); ++i) rows *= y.shape[i];
    return rows >= kMinRows;
  }
};

}  // namespace

std::unique_ptr<Pass> make_gemv_as_reduction() { return std::make_unique<GemvAsReduction>(); }

}  // namespace ff::passes
