// canonicalize: local algebraic simplification, iterated to a fixed point.
//
// The rewrite rules are data: kRules below is a table of (op, rule name,
// small function). Each function looks at one node, and either rewrites it
// through the Rewriter helpers and returns true, or returns false. The driver
// sweeps the graph in order, applying the first rule of a node's op that fires,
// until a sweep changes nothing. Rules only rewrite a node in place (new op,
// operands, attrs; same result Value and type) or forward its result to an
// existing value; they never create nodes, so nodes they make dead are left for
// `dce`.
//
// Invariants every rule keeps (the Rewriter enforces them, so a buggy rule is
// skipped rather than producing a wrong graph):
//   * A value's type never changes. Forwarding a result to a value requires the
//     exact same TensorType (dtype, shape, strides): mul(x_i64, 1.0) is f32, not
//     x, so it stays. An in-place rewrite must re-infer the declared type.
//   * Outputs do not start aliasing inputs or each other. A fresh (non-view)
//     result that is a graph output or a mutation's new value is only forwarded
//     to a value that is itself fresh and private: produced by a non-layout,
//     non-opaque node, not an output, and not viewed by any other node. So
//     `return copy(%x)` keeps its copy. A view result that is an output is never
//     forwarded to a graph input (`return view(%x)` with the same type stays).
//
// ---- Floating-point policy ----------------------------------------------------
// The IR means eager PyTorch, op by op: each pointwise op rounds to its dtype,
// and a literal operand takes the other operand's compute type (literal values
// below are read that way: f32 for f32/f16/bf16 tensors, f64 for f64).
// Two classes of float rules:
//
// (1) Exact rules, for every dtype: results bitwise equal to eager, except that
//     a zero's sign may change, and that a folded power-of-two mul chain does
//     not overflow or underflow where an intermediate of the eager chain would
//     (an intermediate that is subnormal rounds once more in eager: at most one
//     subnormal step, 6e-8 in f16, apart):
//       x*1 -> x, x/1 -> x, x+0 -> x (x+0.0 maps -0 to +0; only the zero's
//       sign differs), pow(x,1) -> x, x-c -> x+(-c), x*(-1) -> neg(x),
//       neg(neg(x)) -> x, neg(x)*c -> x*(-c), neg(x*c) -> x*(-c),
//       x+neg(y) -> x-y, x-neg(y) -> x+y, literal moved to the right of add/mul,
//       x/c -> x*(1/c) only when 1/c is exactly representable in x's dtype
//       (c a power of two; otherwise the div stays: x/3 != x*(1/3)),
//       (x*a)*b -> x*(a*b) when a and b are powers of two and a*b is a finite,
//       non-zero value of the dtype.
//     Integer add/mul literal chains fold too (two's-complement arithmetic is
//     associative), when the folded literal fits the dtype.
//
// (2) Reassociation of literal chains, f32 and f64 only:
//       (x*a)*b -> x*(a*b)   for any finite non-zero a, b (|a*b| a normal value);
//       (x+a)+b -> x+(a+b)   for finite |a|, |b| <= 256.
//     These change results at the rounding level only: a mul chain by at most a
//     couple of ulps relative; an add chain by half an ulp of x+a, i.e. at most
//     ~3e-5 absolute for |x| <= 256 in f32 (the literal bound keeps that so),
//     inside the 1e-4 tolerance fuseforge is held to against eager. In
//     particular (x+1.0)-1.0 becomes x+0.0 and then x: more accurate than eager
//     (which loses x's low bits in x+1), and different from it by at most
//     ~1.2e-7 for |x| < 2. Folding can also avoid an overflow/underflow that the
//     op-by-op chain would hit. f16/bf16 get no reassociation: one rounding step
//     there is ~1e-3 relative, outside the tolerance. (The golden tests compare
//     with the interpreter at atol=1e-6, so they use literals of magnitude <= 4.)
//     A folded float literal is written as the shortest decimal that denotes
//     the same compute-dtype value (f32(0.1)*3 prints as 0.3).
//   Not done, as not exact and not needed: distributing (x+a)*b -> x*b + a*b,
//   x/c -> x*(1/c) for non-powers of two, x*0 -> 0 (NaN/inf), x-x -> 0.
//
// ---- Layout rules ---------------------------------------------------------------
// A chain of non-copying views (permute, expand, squeeze, unsqueeze, slice,
// select, and views that provably do not copy: of a contiguous tensor, or
// yielding non-contiguous strides) whose end has the same dtype, shape and
// strides as its start, at the same storage offset, is the start: this covers
// view/expand to the same type, identity permutes, cancelling squeeze/unsqueeze
// pairs and permute pairs. permute(permute(x)) and view(view(x)) (x contiguous)
// are merged into one node. cast to the same type, cast(cast(x)) through a
// lossless intermediate dtype, copy(x), cat of one tensor, where(c, x, x) and
// where(true|false, x, y) forward to their operand.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

// ---- helpers on dtypes and literals

bool is_float(DType t) { return is_floating(t); }

// Is `v` exactly a value of dtype `t` (finite, and non-zero unless allow_zero)?
bool representable(double v, DType t, bool allow_zero = false) {
  if (!std::isfinite(v)) return false;
  if (v == 0.0) return allow_zero;
  return round_to_dtype(v, t) == v;
}

// Smallest positive normal value of a float dtype.
double min_normal(DType t) {
  switch (t) {
    case DType::f16:
      return std::ldexp(1.0, -14);
    case DType::bf16:
      return static_cast<double>(std::numeric_limits<float>::min());
    case DType::f32:
      return static_cast<double>(std::numeric_limits<float>::min());
    default:
      return std::numeric_limits<double>::min();
  }
}

// The value a literal operand takes next to a tensor of dtype `t`.
double lit_value(const Scalar& s, DType t) {
  double v = s.as_double();
  return is_float(t) ? round_to_dtype(v, compute_dtype(t)) : v;
}

bool int_fits(int64_t v, DType t) {
  if (t == DType::i32) return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
  return t == DType::i64;
}

// -c for a literal used with a tensor of dtype t; nullopt if it does not exist.
std::optional<Scalar> negate(const Scalar& s, DType t) {
  if (s.kind == Scalar::Kind::Float) return Scalar::of_float(-s.f);
  if (s.kind != Scalar::Kind::Int || s.i == std::numeric_limits<int64_t>::min()) return std::nullopt;
  if (!is_float(t) && !int_fits(-s.i, t)) return std::nullopt;
  return Scalar::of_int(-s.i);
}

// The shortest decimal literal that denotes the same value as c once rounded
// to the compute dtype `ct` of the tensor it is used with (f32: 0.3, not the
// exact product 0.30000000447034836 of f32(0.1) and 3).
double shortest_literal(double c, DType ct) {
  if (ct == DType::f64 || !std::isfinite(c)) return c;
  double want = round_to_dtype(c, ct);
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, want);
    double d = std::strtod(buf, nullptr);
    if (round_to_dtype(d, ct) == want) return d;
  }
  return want;
}

// Folds literal b into literal a for the chain op(op(x, a), b) with x of dtype t.
std::optional<Scalar> fold_chain(Op op, const Scalar& a, const Scalar& b, DType t) {
  bool both_int = a.kind == Scalar::Kind::Int && b.kind == Scalar::Kind::Int;
  int64_t ic = 0;
  bool int_ok =
      both_int && !(op == Op::Add ? __builtin_add_overflow(a.i, b.i, &ic) : __builtin_mul_overflow(a.i, b.i, &ic));
  if (is_integral(t)) {
    // Two's-complement add and mul are associative: always exact.
    if (!int_ok || !int_fits(ic, t)) return std::nullopt;
    return Scalar::of_int(ic);
  }
  if (!is_float(t)) return std::nullopt;
  double av = lit_value(a, t), bv = lit_value(b, t);
  if (!std::isfinite(av) || !std::isfinite(bv)) return std::nullopt;
  double c;
  if (op == Op::Mul) {
    if (av == 0.0 || bv == 0.0) return std::nullopt;
    c = av * bv;
    if (!std::isfinite(c) || std::fabs(c) < min_normal(t) || std::fabs(round_to_dtype(c, t)) == INFINITY)
      return std::nullopt;
    bool exact = is_pow2(av) && is_pow2(bv) && representable(c, t);
    if (!exact && !reassociates(t)) return std::nullopt;
  } else {
    if (!reassociates(t)) return std::nullopt;  // (x+a)+b is never exact
    if (std::fabs(av) > 256.0 || std::fabs(bv) > 256.0) return std::nullopt;
    c = av + bv;
  }
  // Keep an int literal when both were ints and the value is what they say.
  if (int_ok && static_cast<double>(ic) == c) return Scalar::of_int(ic);
  return Scalar::of_float(shortest_literal(c, compute_dtype(t)));
}

// Does casting dtype `from` to `via` keep every value exactly?
bool lossless_cast(DType from, DType via) {
  if (from == via) return true;
  switch (from) {
    case DType::boolean:
      return true;
    case DType::f16:
    case DType::bf16:
      return via == DType::f32 || via == DType::f64;
    case DType::f32:
      return via == DType::f64;
    case DType::i32:
      return via == DType::i64 || via == DType::f64;
    default:
      return false;
  }
}

// ---- the rewriter: rule helpers that keep the invariants

class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g) {
    for (auto& n : g.nodes())
      for (auto& o : n->operands)
        if (o.is_value()) uses_[o.value]++;
    for (Value* v : g.outputs()) uses_[v]++;
    for (auto& m : g.mutations()) uses_[m.value]++;
  }

  bool dead(const Node* n) const {
    for (Value* r : n->results)
      if (use_count(r)) return false;
    return true;
  }

  // The literal operand i of n (a number: int or float, not bool), else null.
  static const Scalar* lit(const Node* n, size_t i) {
    if (i >= n->operands.size() || n->operands[i].is_value()) return nullptr;
    const Scalar& s = n->operands[i].literal;
    return s.kind == Scalar::Kind::Bool ? nullptr : &s;
  }
  // Literal operand i of n whose value (next to a tensor of n's result dtype) is v.
  static bool lit_is(const Node* n, size_t i, double v) {
    const Scalar* s = lit(n, i);
    return s && lit_value(*s, n->result()->type.dtype) == v;
  }
  // The producer of operand i if it is a single-result `op` node.
  static Node* def(const Node* n, size_t i, Op op) {
    Value* v = i < n->operands.size() ? n->operands[i].value : nullptr;
    if (!v || !v->producer || v->producer->op != op || v->producer->results.size() != 1) return nullptr;
    return v->producer;
  }

  // Replaces every use of n's (only) result by x. Refused when the types differ
  // or when it would make outputs alias inputs or each other.
  bool forward(Node* n, Value* x) {
    if (!x || n->results.size() != 1) return false;
    Value* r = n->result();
    if (r == x || !(r->type == x->type)) return false;
    if (g_.is_graph_output(r)) {
      if (x->is_input()) return false;
      if (!is_view_op(n->op) && escapes(x, n)) return false;
    }
    int c = use_count(r);
    g_.replace_all_uses(r, x);
    uses_[x] += c;
    uses_[r] = 0;
    return true;
  }

  // Rewrites n in place to op(operands) {attrs}; refused (and undone) unless the
  // op's rule gives exactly n's declared result types.
  bool rewrite(Node* n, Op op, std::vector<Operand> operands, std::optional<Attrs> attrs = std::nullopt) {
    Op old_op = n->op;
    std::vector<Operand> old_operands = n->operands;
    Attrs old_attrs = n->attrs;
    n->op = op;
    n->operands = std::move(operands);
    if (attrs) n->attrs = std::move(*attrs);
    bool ok = op_info(op).num_operands < 0 || static_cast<int>(n->operands.size()) == op_info(op).num_operands;
    if (ok) {
      try {
        auto types = infer_result_types(*n);
        ok = types.size() == n->results.size();
        for (size_t i = 0; ok && i < types.size(); ++i) ok = types[i] == n->results[i]->type;
      } catch (const IRError&) {
        ok = false;
      }
    }
    if (!ok) {
      n->op = old_op;
      n->operands = std::move(old_operands);
      n->attrs = std::move(old_attrs);
      return false;
    }
    for (auto& o : old_operands)
      if (o.is_value()) uses_[o.value]--;
    for (auto& o : n->operands)
      if (o.is_value()) uses_[o.value]++;
    return true;
  }

 private:
  Graph& g_;
  std::unordered_map<const Value*, int> uses_;

  int use_count(const Value* v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second;
  }

  // Could returning x as an output make it alias another output or an input?
  bool escapes(Value* x, const Node* except) const {
    if (x->is_input() || g_.is_graph_output(x)) return true;
    OpKind k = op_kind(x->producer->op);
    if (is_view_op(x->producer->op) || k == OpKind::Opaque) return true;
    for (Node* u : g_.users(x))
      if (u != except && (is_view_op(u->op) || op_kind(u->op) == OpKind::Opaque)) return true;
    return false;
  }
};

// ---- rules

using RuleFn = bool (*)(Rewriter&, Node*);
struct Rule {
  Op op;
  const char* name;
  RuleFn apply;
};

DType dtype_of(const Node* n) { return n->result()->type.dtype; }

// op(op(x, a), b) -> op(x, fold(a, b)) for add/mul literal chains.
bool fold_literal_chain(Rewriter& rw, Node* n) {
  const Scalar* b = Rewriter::lit(n, 1);
  Node* inner = Rewriter::def(n, 0, n->op);
  if (!b || !inner) return false;
  const Scalar* a = Rewriter::lit(inner, 1);
  Value* x = inner->input(0);
  if (!a || !x) return false;
  DType t = dtype_of(n);
  if (x->type.dtype != t || dtype_of(inner) != t) return false;
  auto c = fold_chain(n->op, *a, *b, t);
  return c && rw.rewrite(n, n->op, {Operand::of(x), Operand::of(*c)});
}

// op(literal, x) -> op(x, literal) for commutative add/mul.
bool literal_to_rhs(Rewriter& rw, Node* n) {
  if (!Rewriter::lit(n, 0) || !n->operands[1].is_value()) return false;
  return rw.rewrite(n, n->op, {n->operands[1], n->operands[0]});
}

// Total storage-offset change of a non-copying view node, or nullopt if the
// node may copy (a view of a non-contiguous tensor that yields contiguous strides).
std::optional<int64_t> view_offset(const Node* n) {
  const TensorType& in = n->input(0)->type;
  const TensorType& out = n->result()->type;
  int64_t rank = static_cast<int64_t>(in.shape.size());
  switch (n->op) {
    case Op::View:
      if (!in.is_contiguous() && out.is_contiguous()) return std::nullopt;
      return 0;
    case Op::Slice: {
      int64_t d = normalize_dim(n->attr_int("dim"), rank), size = in.shape[d];
      int64_t start = n->attr_int_or("start", 0);
      if (start < 0) start += size;
      start = std::max<int64_t>(0, std::min(start, size));
      return start * in.strides[d];
    }
    case Op::Select: {
      int64_t d = normalize_dim(n->attr_int("dim"), rank);
      int64_t idx = n->attr_int("index");
      if (idx < 0) idx += in.shape[d];
      return idx * in.strides[d];
    }
    default:
      return 0;
  }
}

// A chain of views from some value a to n's result with the same type and a
// zero offset is a itself.
bool view_chain_identity(Rewriter& rw, Node* n) {
  if (!n->input(0)) return false;
  const TensorType& t = n->result()->type;
  int64_t offset = 0;
  const Node* cur = n;
  for (int depth = 0; depth < 8; ++depth) {
    auto off = view_offset(cur);
    if (!off) return false;
    offset += *off;
    Value* a = cur->input(0);
    if (offset == 0 && a->type == t) return rw.forward(n, a);
    if (!a->producer || !is_view_op(a->producer->op) || a->producer->results.size() != 1 || !a->producer->input(0))
      return false;
    cur = a->producer;
  }
  return false;
}

// A reduction over dims that all have extent 1 (sum, mean, prod, amax, amin,
// logsumexp: each of one element is that element, inf and NaN included) is
// its input, viewed to the result's shape: no kernel, and the ops after it
// join the kernel before it (a logsumexp over channels, then a sum over the
// 1x1 pixels a global pool left).
bool reduce_unit_extents(Rewriter& rw, Node* n) {
  if (n->operands.size() != 1 || !n->operands[0].is_value() || !n->has_attr("dims")) return false;
  const TensorType& x = n->input(0)->type;
  if (x.dtype != n->result()->type.dtype) return false;  // sum's dtype= (or an int's promotion) casts
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  for (int64_t d : n->attr_ints("dims")) {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank || x.shape[d] != 1) return false;
  }
  if (x.shape == n->result()->type.shape) return rw.forward(n, n->input(0));
  return rw.rewrite(n, Op::View, {n->operands[0]}, Attrs{});
}

const Rule kRules[] = {
    // ---- add / sub
    {Op::Add, "add-literal-to-rhs", literal_to_rhs},
    {Op::Add, "add-zero",
     [](Rewriter& rw, Node* n) { return Rewriter::lit_is(n, 1, 0.0) && rw.forward(n, n->input(0)); }},
    {Op::Add, "add-literal-chain", fold_literal_chain},
    {Op::Add, "add-neg-rhs",
     [](Rewriter& rw, Node* n) {
       Node* ng = Rewriter::def(n, 1, Op::Neg);
       return ng && n->operands[0].is_value() && rw.rewrite(n, Op::Sub, {n->operands[0], ng->operands[0]});
     }},
    {Op::Add, "add-neg-lhs",
     [](Rewriter& rw, Node* n) {
       Node* ng = Rewriter::def(n, 0, Op::Neg);
       return ng && n->operands[1].is_value() && rw.rewrite(n, Op::Sub, {n->operands[1], ng->operands[0]});
     }},
    {Op::Sub, "sub-literal-to-add",
     [](Rewriter& rw, Node* n) {
       const Scalar* c = Rewriter::lit(n, 1);
       if (!c || !n->operands[0].is_value()) return false;
       auto neg = negate(*c, dtype_of(n));
       return neg && rw.rewrite(n, Op::Add, {n->operands[0], Operand::of(*neg)});
     }},
    {Op::Sub, "sub-neg",
     [](Rewriter& rw, Node* n) {
       Node* ng = Rewriter::def(n, 1, Op::Neg);
       return ng && n->operands[0].is_value() && rw.rewrite(n, Op::Add, {n->operands[0], ng->operands[0]});
     }},
    // ---- mul / div / neg / pow
    {Op::Mul, "mul-literal-to-rhs", literal_to_rhs},
    {Op::Mul, "mul-one",
     [](Rewriter& rw, Node* n) { return Rewriter::lit_is(n, 1, 1.0) && rw.forward(n, n->input(0)); }},
    {Op::Mul, "mul-minus-one",
     [](Rewriter& rw, Node* n) {
       return Rewriter::lit_is(n, 1, -1.0) && n->operands[0].is_value() && rw.rewrite(n, Op::Neg, {n->operands[0]});
     }},
    {Op::Mul, "mul-literal-chain", fold_literal_chain},
    {Op::Mul, "mul-neg-literal",
     [](Rewriter& rw, Node* n) {
       Node* ng = Rewriter::def(n, 0, Op::Neg);
       const Scalar* c = Rewriter::lit(n, 1);
       if (!ng || !c) return false;
       auto neg = negate(*c, dtype_of(n));
       return neg && rw.rewrite(n, Op::Mul, {ng->operands[0], Operand::of(*neg)});
     }},
    {Op::Div, "div-one",
     [](Rewriter& rw, Node* n) { return Rewriter::lit_is(n, 1, 1.0) && rw.forward(n, n->input(0)); }},
    {Op::Div, "div-pow2-to-mul",
     [](Rewriter& rw, Node* n) {
       const Scalar* c = Rewriter::lit(n, 1);
       Value* x = n->input(0);
       DType t = dtype_of(n);
       if (!c || !x || !is_float(t) || x->type.dtype != t) return false;
       double cv = c->as_double();
       if (!is_pow2(cv) || !representable(cv, t) || !representable(1.0 / cv, t)) return false;
       return rw.rewrite(n, Op::Mul, {Operand::of(x), Operand::of(Scalar::of_float(1.0 / cv))});
     }},
    {Op::Neg, "neg-neg",
     [](Rewriter& rw, Node* n) {
       Node* inner = Rewriter::def(n, 0, Op::Neg);
       return inner && rw.forward(n, inner->input(0));
     }},
    {Op::Neg, "neg-mul-literal",
     [](Rewriter& rw, Node* n) {
       Node* m = Rewriter::def(n, 0, Op::Mul);
       const Scalar* c = m ? Rewriter::lit(m, 1) : nullptr;
       if (!c || !m->operands[0].is_value()) return false;
       auto neg = negate(*c, dtype_of(m));
       return neg && rw.rewrite(n, Op::Mul, {m->operands[0], Operand::of(*neg)});
     }},
    {Op::Pow, "pow-one",
     [](Rewriter& rw, Node* n) { return Rewriter::lit_is(n, 1, 1.0) && rw.forward(n, n->input(0)); }},
    // ---- casts and copies
    {Op::Cast, "cast-same-type", [](Rewriter& rw, Node* n) { return rw.forward(n, n->input(0)); }},
    {Op::Cast, "cast-lossless-cast",
     [](Rewriter& rw, Node* n) {
       Node* inner = Rewriter::def(n, 0, Op::Cast);
       Value* x = inner ? inner->input(0) : nullptr;
       if (!x) return false;
       return lossless_cast(x->type.dtype, dtype_of(inner)) && rw.rewrite(n, Op::Cast, {Operand::of(x)});
     }},
    {Op::Copy, "copy-elide", [](Rewriter& rw, Node* n) { return rw.forward(n, n->input(0)); }},
    {Op::Cat, "cat-single",
     [](Rewriter& rw, Node* n) { return n->operands.size() == 1 && rw.forward(n, n->input(0)); }},
    // ---- where
    {Op::Where, "where-same-branches",
     [](Rewriter& rw, Node* n) { return n->input(1) && n->input(1) == n->input(2) && rw.forward(n, n->input(1)); }},
    {Op::Where, "where-literal-condition",
     [](Rewriter& rw, Node* n) {
       const Operand& c = n->operands[0];
       if (c.is_value() || c.literal.kind != Scalar::Kind::Bool) return false;
       return rw.forward(n, n->input(c.literal.i ? 1 : 2));
     }},
    // ---- views
    {Op::View, "view-chain-identity", view_chain_identity},
    {Op::Permute, "view-chain-identity", view_chain_identity},
    {Op::Expand, "view-chain-identity", view_chain_identity},
    {Op::Unsqueeze, "view-chain-identity", view_chain_identity},
    {Op::Squeeze, "view-chain-identity", view_chain_identity},
    {Op::Slice, "view-chain-identity", view_chain_identity},
    {Op::Select, "view-chain-identity", view_chain_identity},
    {Op::Permute, "permute-permute",
     [](Rewriter& rw, Node* n) {
       Node* inner = Rewriter::def(n, 0, Op::Permute);
       if (!inner || !inner->input(0)) return false;
       int64_t rank = static_cast<int64_t>(inner->input(0)->type.shape.size());
       const auto& p = inner->attr_ints("dims");
       const auto& q = n->attr_ints("dims");
       std::vector<int64_t> r;
       for (int64_t d : q) r.push_back(normalize_dim(p.at(normalize_dim(d, rank)), rank));
       Attrs attrs = n->attrs;
       attrs["dims"] = r;
       return rw.rewrite(n, Op::Permute, {inner->operands[0]}, attrs);
     }},
    {Op::View, "view-view",
     [](Rewriter& rw, Node* n) {
       Node* inner = Rewriter::def(n, 0, Op::View);
       if (!inner || !inner->input(0) || !inner->input(0)->type.is_contiguous()) return false;
       return rw.rewrite(n, Op::View, {inner->operands[0]});
     }},
    // ---- reductions
    {Op::Sum, "reduce-unit-extents", reduce_unit_extents},
    {Op::Mean, "reduce-unit-extents", reduce_unit_extents},
    {Op::Prod, "reduce-unit-extents", reduce_unit_extents},
    {Op::Amax, "reduce-unit-extents", reduce_unit_extents},
    {Op::Amin, "reduce-unit-extents", reduce_unit_extents},
    {Op::Logsumexp, "reduce-unit-extents", reduce_unit_extents},
};

class Canonicalize : public Pass {
 public:
  std::string_view name() const override { return "canonicalize"; }

  bool run(Graph& g) override {
    std::unordered_map<Op, std::vector<const Rule*>> by_op;
    for (const Rule& r : kRules) by_op[r.op].push_back(&r);
    Rewriter rw(g);
    bool changed = false;
    // Every rule strictly simplifies (fewer ops on a chain, or a cheaper op), so
    // this terminates well before the bound; the bound guards against a bad rule.
    for (int sweep = 0; sweep < 64; ++sweep) {
      bool swept = false;
      for (auto& np : g.nodes()) {
        Node* n = np.get();
        if (n->results.size() != 1 || rw.dead(n)) continue;
        auto it = by_op.find(n->op);
        if (it == by_op.end()) continue;
        for (const Rule* r : it->second)
          if (r->apply(rw, n)) {
            swept = true;
            break;
          }
      }
      if (!swept) break;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_canonicalize() { return std::make_unique<Canonicalize>(); }

}  // namespace ff::passes
