// decompose_long_norm: a normalization (layer_norm, softmax, log_softmax) of
// few long rows becomes its statistics, plain reductions that
// split_long_reduction then splits into partials, and pointwise ops.
//
//   %y = layer_norm(%x, %w, %b) {eps=1e-05, ndims=3} : f32[12,48,160,160]
// becomes
//   %m = mean(%x) {dims=[1, 2, 3], keepdim=true} : f32[12,1,1,1]
//   %v = var(%x) {correction=0, dims=[1, 2, 3], keepdim=true} : f32[12,1,1,1]
//   %y = (%x - %m) * rsqrt(%v + 1e-05) * %w + %b
// and softmax(x) over dim d as e / sum(e) with e = exp(x - amax(x)) (and
// log_softmax as x - amax(x) - log(sum(e))), as ATen computes them.
//
// A normalization kernel gives each row a block that holds it; 12 rows of
// 1.2M elements would leave most of the GPU idle, so the reduction scheduler
// hands such a group to ATen, whose kernels also take a block per row.
// Decomposed, the statistics read the input with the whole GPU (mean and var
// share one Welford pass) and the normalization is one pointwise pass.
// f32 and f64 only, as split_long_reduction.
#include "kernel/reduction_domain.h"
#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/split_long_reduction.h"

namespace ff::passes {

namespace {

// A normalization whose rows (a block each at most) leave the GPU idle and
// whose statistics split_long_reduction splits.
bool long_normalization(const Node& n, const Target& target) {
  if (!fusion::is_normalization(n.op) || !n.operands[0].is_value()) return false;
  const TensorType& x = n.input(0)->type;
  const std::vector<bool> mask = fusion::reduced_mask(n);
  int64_t rows = 1;
  for (size_t d = 0; d < mask.size(); ++d)
    if (!mask[d]) rows *= x.shape[d];
  return n.result()->type.dtype == x.dtype && fusion::leaves_gpu_idle(rows, numel(x.shape), target) &&
         splits_into_partials(x, mask);
}

class DecomposeLongNorm : public Pass {
 public:
  std::string_view name() const override { return "decompose_long_norm"; }
  void configure(const PassOptions& options) override { target_ = options.target; }

  bool run(Graph& g) override {
    std::vector<Node*> replaced;
    for (auto& n : g.nodes())
      if (long_normalization(*n, target_)) replaced.push_back(n.get());
    for (Node* n : replaced) g.replace_all_uses(n->result(), decompose(g, n));
    if (replaced.empty()) return false;
    g.erase_nodes(replaced);
    return true;
  }

 private:
  static Value* decompose(Graph& g, Node* n) {
    Value* x = n->input(0);
    std::vector<int64_t> dims;
    const std::vector<bool> mask = fusion::reduced_mask(*n);
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) dims.push_back(static_cast<int64_t>(d));
    auto reduce = [&](Op op, Value* v, Attrs attrs = {}) {
      attrs["dims"] = dims;
      attrs["keepdim"] = true;
      Node* r = g.insert_before(n, op, {Operand::of(v)}, {v->type}, std::move(attrs));
      r->result()->type = infer_result_types(*r).at(0);
      return r->result();
    };
    auto unary = [&](Op op, Value* a) { return g.insert_before(n, op, {Operand::of(a)}, {a->type})->result(); };
    // Every binary op's first operand has the result's shape (the statistic is the second).
    auto binary = [&](Op op, Value* a, Operand b) {
      return g.insert_before(n, op, {Operand::of(a), std::move(b)}, {a->type})->result();
    };
    if (n->op == Op::LayerNorm) {
      Value* mean = reduce(Op::Mean, x);
      Value* var = reduce(Op::Var, x, {{"correction", int64_t{0}}});
      Value* rstd = unary(Op::Rsqrt, binary(Op::Add, var, Operand::of(Scalar::of_float(n->attr_float("eps")))));
      Value* y = binary(Op::Mul, binary(Op::Sub, x, Operand::of(mean)), Operand::of(rstd));
      y = binary(Op::Mul, y, n->operands[1]);
      return binary(Op::Add, y, n->operands[2]);
    }
    Value* shifted = binary(Op::Sub, x, Operand::of(reduce(Op::Amax, x)));
    Value* e = unary(Op::Exp, shifted);
    Value* total = reduce(Op::Sum, e);
    if (n->op == Op::Softmax) return binary(Op::Div, e, Operand::of(total));
    return binary(Op::Sub, shifted, Operand::of(unary(Op::Log, total)));
  }

  Target target_ = default_target();
};

}  // namespace

std::unique_ptr<Pass> make_decompose_long_norm() { return std::make_unique<DecomposeLongNorm>(); }

}  // namespace ff::passes
