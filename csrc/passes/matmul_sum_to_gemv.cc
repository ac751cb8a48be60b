// matmul_sum_to_gemv: a sum (or mean) over the columns of a matmul's result
// becomes a matrix-vector product against the right operand's row sums.
//
//   %y = mm(%a, %b) : [M,N] ; %z = <scale chain>(%y) ; %s = sum(%z) {dims=[1]}
// becomes
//   %r = sum(%b) {dims=[1], keepdim=true} : [K,1] ; %v = mm(%a, %r) : [M,1]
//   %s = <scale chain>(%v)  (then a view to [M] when keepdim is false)
//
// since sum_j (a @ b)[i,j] = sum_k a[i,k] * (sum_j b[k,j]). bmm works alike per
// batch; addmm (a linear layer) adds the bias's sum over the columns. The scale chain is what sum commutes with:
// mul/div by a scalar, neg. An M x K x N GEMM becomes a K x N reduction and an M x K GEMV.
//
// Accuracy: the new sums run in f64 (see rewrite), so the result is at least
// as close to the exact value as eager's. f32/f64 only: f16/bf16 keep eager's
// order, because eager rounds every GEMM output element there and a more
// accurate answer would not match it to 1e-4.

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

class MatmulSumToGemv : public Pass {
 public:
  std::string_view name() const override { return "matmul_sum_to_gemv"; }

  bool run(Graph& g) override {
    std::vector<Match> matches;
    for (auto& n : g.nodes())
      if (auto m = match(g, *n)) matches.push_back(*m);
    std::vector<const Node*> replaced;
    for (const Match& m : matches) {
      rewrite(g, m);
      replaced.push_back(m.reduce);
      replaced.push_back(m.matmul);
      replaced.insert(replaced.end(), m.chain.begin(), m.chain.end());
    }
    // Each replaced node's only reader was the next one (checked in match).
    g.erase_nodes(replaced);
    return !matches.empty();
  }

 private:
  struct Match {
    Node* reduce;              // sum/mean over the last dim
    Node* matmul;              // mm or bmm
    std::vector<Node*> chain;  // scale ops from the matmul's result to the reduction, in order
  };

  static std::optional<Match> match(const Graph& g, Node& reduce) {
    if ((reduce.op != Op::Sum && reduce.op != Op::Mean) || !reduce.operands[0].is_value()) return std::nullopt;
    const TensorType& in = reduce.input(0)->type;
    if (!reassociates(in.dtype) || reduce.result()->type.dtype != in.dtype) return std::nullopt;
    const int64_t rank = static_cast<int64_t>(in.shape.size());
    const auto& dims = reduce.attr_ints("dims");
    if (dims.size() != 1 || normalize_dim(dims[0], rank) != rank - 1) return std::nullopt;
    Match m{&reduce, nullptr, {}};
    Value* v = reduce.input(0);
    while (true) {
      if (g.users(v).size() != 1 || g.is_graph_output(v)) return std::nullopt;  // the full product is needed
      Node* p = v->producer;
      if (p == nullptr) return std::nullopt;
      if ((p->op == Op::Mm && rank == 2) || (p->op == Op::Bmm && rank == 3) || (plain_addmm(*p) && rank == 2)) {
        m.matmul = p;
        break;
      }
      if (!scale_of(*p)) return std::nullopt;
      m.chain.insert(m.chain.begin(), p);
      v = p->input(0);
    }
    for (const Operand& o : m.matmul->operands)
      if (!o.is_value() || o.value->type.dtype != in.dtype) return std::nullopt;
    return m;
  }

  // addmm(bias, a, b) = bias + a @ b (alpha = beta = 1).
  static bool plain_addmm(const Node& n) {
    return n.op == Op::Addmm && (!n.has_attr("alpha") || n.attr_float("alpha") == 1.0) &&
           (!n.has_attr("beta") || n.attr_float("beta") == 1.0);
  }

  // mul(x, s), div(x, s) or neg(x) with x the chain value (operand 0) and s rank 0.
  static bool scale_of(const Node& n) {
    if (!n.operands[0].is_value() || n.result()->type.dtype != n.input(0)->type.dtype) return false;
    if (n.op == Op::Neg) return true;
    return (n.op == Op::Mul || n.op == Op::Div) && n.operands.size() == 2 && is_rank0(n.operands[1]);
  }

  // `x` in f64 (cast unless it is).
  static Value* wide(Graph& g, Node* at, Value* x) {
    if (x->type.dtype == DType::f64) return x;
    return g.insert_before(at, Op::Cast, {Operand::of(x)}, {TensorType::contiguous(DType::f64, x->type.shape)})
        ->result();
  }

  // The sums of `x`'s last dim (kept as 1), in f64. The cast is its own node
  // rather than the sum's result dtype: a reduction kernel takes a cast as
  // its prologue, reading x once, where ATen's sum into a wider dtype writes
  // and reads an f64 copy of x first.
  static Value* wide_row_sums(Graph& g, Node* at, Value* x) {
    Shape shape = x->type.shape;
    shape.back() = 1;
    return g
        .insert_before(at, Op::Sum, {Operand::of(wide(g, at, x))}, {TensorType::contiguous(DType::f64, shape)},
                       {{"dims", std::vector<int64_t>{static_cast<int64_t>(shape.size()) - 1}}, {"keepdim", true}})
        ->result();
  }

  // The row sums and the GEMV run in f64 (x cast once), then round to the
  // result dtype: each output is then a correctly rounded dot product, at
  // least as accurate as eager's sum of rounded GEMM outputs.
  // v + (the bias broadcast to [M,N], summed over N), in f64.
  static Value* add_bias_row_sums(Graph& g, Node* at, Value* bias, Value* v, int64_t columns) {
    Value* sums = nullptr;
    if (bias->type.shape.empty() || bias->type.shape.back() == 1) {  // one value per row, repeated over the N columns
      sums =
          g.insert_before(at, Op::Mul,
                          {Operand::of(wide(g, at, bias)), Operand::of(Scalar::of_float(static_cast<double>(columns)))},
                          {TensorType::contiguous(DType::f64, bias->type.shape)})
              ->result();
    } else {
      sums = wide_row_sums(g, at, bias);
    }
    return g.insert_before(at, Op::Add, {Operand::of(v), Operand::of(sums)}, {v->type})->result();
  }

  static void rewrite(Graph& g, const Match& m) {
    Node* at = m.reduce;
    const bool addmm = m.matmul->op == Op::Addmm;
    Value* a = m.matmul->input(addmm ? 1 : 0);
    Value* b = m.matmul->input(addmm ? 2 : 1);
    const DType dt = m.matmul->result()->type.dtype;
    auto f64 = [](Shape s) { return TensorType::contiguous(DType::f64, std::move(s)); };
    const int64_t columns = b->type.shape.back();
    Value* rows = wide_row_sums(g, at, b);
    a = wide(g, at, a);
    Shape out_shape = m.matmul->result()->type.shape;
    out_shape.back() = 1;
    const Op product = addmm ? Op::Mm : m.matmul->op;
    Value* v = g.insert_before(at, product, {Operand::of(a), Operand::of(rows)}, {f64(out_shape)})->result();
    if (addmm) v = add_bias_row_sums(g, at, m.matmul->input(0), v, columns);
    if (m.reduce->op == Op::Mean) {
      v = g.insert_before(at, Op::Div, {Operand::of(v), Operand::of(Scalar::of_float(static_cast<double>(columns)))},
                          {f64(out_shape)})
              ->result();
    }
    if (dt != DType::f64)
      v = g.insert_before(at, Op::Cast, {Operand::of(v)}, {TensorType::contiguous(dt, out_shape)})->result();
    for (Node* op : m.chain) {
      std::vector<Operand> operands = op->operands;
      operands[0] = Operand::of(v);
      v = g.insert_before(at, op->op, operands, {TensorType::contiguous(dt, out_shape)}, op->attrs)->result();
    }
    const TensorType& want = m.reduce->result()->type;
    if (v->type.shape != want.shape) {  // keepdim=false: drop the reduced dim
      v = g.insert_before(at, Op::View, {Operand::of(v)}, {TensorType::contiguous(dt, want.shape)})->result();
    }
    g.replace_all_uses(m.reduce->result(), v);
  }
};

}  // namespace

std::unique_ptr<Pass> make_matmul_sum_to_gemv() { return std::make_unique<MatmulSumToGemv>(); }

}  // namespace ff::passes
