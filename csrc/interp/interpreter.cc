// CPU reference interpreter (see interpreter.h).
//
// Every value is a row-major HostTensor of doubles. Each node is evaluated by
// the function of its op family into raw doubles of the node's declared result
// type, and the driver then rounds every element to the declared dtype, the way
// eager PyTorch stores each op's result.
//
// Layout ops, broadcasting and reductions all reduce to one index helper,
// strided_offsets(): the row-major offsets of a strided view of a row-major
// tensor. A broadcast operand is a view with stride 0 in broadcast dims, a
// permute a view with permuted strides, a slice a view with a base and a
// scaled stride, and the rows of a reduction a view that puts the kept dims
// first and the reduced dims last.
#include "interp/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

namespace ff::interp {

namespace {

using Offsets = std::vector<int64_t>;
using Env = std::unordered_map<const Value*, HostTensor>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- messages

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::string type_str(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + shape_str(shape); }

[[noreturn]] void fail(const Node& n, const std::string& msg) {
  std::string label = n.results.empty() ? std::string(op_name(n.op)) : "%" + n.result()->name + " = " + std::string(op_name(n.op));
  throw IRError("interp: " + label + ": " + msg);
}

// ---------------------------------------------------------------- index helpers

// Row-major offsets of every element of a view with `shape` and `strides`
// (in elements) that starts at `base`, listed in the view's row-major order.
Offsets strided_offsets(const Shape& shape, const Shape& strides, int64_t base = 0) {
  Offsets out(static_cast<size_t>(numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = base;
  for (int64_t& o : out) {
    o = off;
    for (size_t d = shape.size(); d-- > 0;) {  // increment the multi-index, last dim fastest
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

// Strides that read a row-major tensor of shape `in` broadcast (numpy rules) to `out`.
Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape cs = contiguous_strides(in), st(out.size(), 0);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 ? 0 : cs[i];
  return st;
}

std::vector<double> gather(const std::vector<double>& data, const Offsets& offsets) {
  std::vector<double> out(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) out[i] = data[static_cast<size_t>(offsets[i])];
  return out;
}

// The elements of a row-major tensor of `shape` grouped into rows: one row per
// index of the kept dims (in the row-major order of the reduced result), each
// listing the offsets of its elements in the row-major order of the reduced dims.
struct Rows {
  int64_t count = 0, length = 0;
  Offsets offsets;  // count * length entries
  const int64_t* row(int64_t r) const { return offsets.data() + r * length; }
};

Rows rows_over(const Shape& shape, const std::vector<bool>& reduced) {
  Shape cs = contiguous_strides(shape), order_shape, order_strides;
  Rows rows;
  rows.count = rows.length = 1;
  for (int pass = 0; pass < 2; ++pass)  // kept dims first, then the reduced ones
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced[d] == (pass == 1)) {
        order_shape.push_back(shape[d]);
        order_strides.push_back(cs[d]);
        (pass == 1 ? rows.length : rows.count) *= shape[d];
      }
  rows.offsets = strided_offsets(order_shape, order_strides);
  return rows;
}

std::vector<bool> dim_mask(const Node& n, int64_t rank, std::vector<int64_t> dims) {
  std::vector<bool> mask(static_cast<size_t>(rank), dims.empty());  // no dims: all of them
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, rank);
    if (nd < rank) mask[static_cast<size_t>(nd)] = true;  // dim 0 of a 0-d tensor is the tensor itself
  }
  return mask;
}

// ---------------------------------------------------------------- operand access

const HostTensor& value_of(const Env& env, const Node& n, size_t i) {
  if (i >= n.operands.size() || !n.operands[i].is_value()) fail(n, "operand " + std::to_string(i) + " must be a tensor value");
  auto it = env.find(n.operands[i].value);
  if (it == env.end()) fail(n, "operand '%" + n.operands[i].value->name + "' has no value (used before it is defined?)");
  return it->second;
}

HostTensor result_tensor(const Node& n) {
  HostTensor t;
  t.dtype = n.result()->type.dtype;
  t.shape = n.result()->type.shape;
  t.data.assign(static_cast<size_t>(numel(t.shape)), 0.0);
  return t;
}

// ---------------------------------------------------------------- pointwise

bool is_comparison(Op op) {
  switch (op) {
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: return true;
    default: return false;
  }
}

int category(DType d) { return is_floating(d) ? 2 : is_integral(d) ? 1 : 0; }
int category(const Scalar& s) { return s.kind == Scalar::Kind::Float ? 2 : s.kind == Scalar::Kind::Int ? 1 : 0; }

// PyTorch's common dtype of a node's operands: dimensioned tensors promote;
// 0-d tensors and literals (wrapped numbers) only when of a higher category, a
// float literal then giving the default dtype f32 and an int literal i64.
DType common_dtype(const Node& n) {
  std::optional<DType> dim_dt, zero_dt;
  int literal_cat = -1;
  for (const Operand& o : n.operands) {
    if (!o.is_value()) {
      literal_cat = std::max(literal_cat, category(o.literal));
      continue;
    }
    auto& slot = o.value->type.shape.empty() ? zero_dt : dim_dt;
    slot = slot ? promote(*slot, o.value->type.dtype) : o.value->type.dtype;
  }
  std::optional<DType> dt = dim_dt;
  if (!dt || (zero_dt && category(*zero_dt) > category(*dt))) dt = dt ? promote(*dt, *zero_dt) : zero_dt;
  if (!dt || literal_cat > category(*dt))
    dt = literal_cat == 2 ? DType::f32 : literal_cat == 1 ? DType::i64 : DType::boolean;
  return *dt;
}

// The dtype operand `i` is cast to before the op computes, as eager PyTorch
// does: comparisons cast both sides to the common dtype. Arithmetic with a
// floating result casts tensors to the result dtype and takes literals and
// scalar inputs (Python numbers) in its compute type (f32 for f16/bf16).
std::optional<DType> operand_cast(const Node& n, size_t i, DType comparison_dtype) {
  if (is_comparison(n.op)) return comparison_dtype;
  DType result = n.result()->type.dtype;
  switch (n.op) {
    case Op::Cast: case Op::LogicalNot: case Op::LogicalAnd: case Op::LogicalOr: case Op::IsNan:
      return std::nullopt;  // these look at the operand's own value
    case Op::Where:
      if (i == 0) return std::nullopt;
      break;
    default:
      break;
  }
  if (!is_floating(result)) return std::nullopt;
  const Operand& o = n.operands[i];
  bool python_number = !o.is_value() || o.value->input_kind == InputKind::Scalar;
  return python_number ? compute_dtype(result) : result;
}

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

using UnaryFn = double (*)(double);
using BinaryFn = double (*)(double, double);

UnaryFn unary_fn(const Node& n) {
  switch (n.op) {
    case Op::Neg: return [](double x) { return -x; };
    case Op::Abs: return [](double x) { return std::fabs(x); };
    case Op::Exp: return [](double x) { return std::exp(x); };
    case Op::Log: return [](double x) { return std::log(x); };
    case Op::Log1p: return [](double x) { return std::log1p(x); };
    case Op::Expm1: return [](double x) { return std::expm1(x); };
    case Op::Sqrt: return [](double x) { return std::sqrt(x); };
    case Op::Rsqrt: return [](double x) { return 1.0 / std::sqrt(x); };
    case Op::Sigmoid: return sigmoid;
    case Op::Tanh: return [](double x) { return std::tanh(x); };
    case Op::Relu: return [](double x) { return std::isnan(x) ? x : x > 0.0 ? x : 0.0; };
    case Op::Gelu: {
      std::string approx = n.has_attr("approximate") ? n.attr_string("approximate") : "none";
      if (approx == "none") return gelu_erf;
      if (approx == "tanh") return gelu_tanh;
      fail(n, "unknown approximate=\"" + approx + "\"");
    }
    case Op::Silu: return [](double x) { return x * sigmoid(x); };
    case Op::Sin: return [](double x) { return std::sin(x); };
    case Op::Cos: return [](double x) { return std::cos(x); };
    case Op::Reciprocal: return [](double x) { return 1.0 / x; };
    case Op::Erf: return [](double x) { return std::erf(x); };
    case Op::Floor: return [](double x) { return std::floor(x); };
    case Op::Ceil: return [](double x) { return std::ceil(x); };
    case Op::Trunc: return [](double x) { return std::trunc(x); };
    case Op::Round: return [](double x) { return std::nearbyint(x); };  // half to even
    // (0 < x) - (x < 0), as ATen computes it: NaN gives 0.
    case Op::Sign: return [](double x) { return static_cast<double>((0.0 < x) - (x < 0.0)); };
    case Op::LogicalNot: return [](double x) { return x == 0.0 ? 1.0 : 0.0; };
    case Op::IsNan: return [](double x) { return std::isnan(x) ? 1.0 : 0.0; };
    case Op::Cast: case Op::Copy: return [](double x) { return x; };  // the result rounding converts
    default: fail(n, "not a unary pointwise op");
  }
}

BinaryFn binary_fn(const Node& n) {
  switch (n.op) {
    case Op::Add: return [](double a, double b) { return a + b; };
    case Op::Sub: return [](double a, double b) { return a - b; };
    case Op::Mul: return [](double a, double b) { return a * b; };
    case Op::Div: return [](double a, double b) { return a / b; };  // true division, also for integers
    case Op::Pow: return [](double a, double b) { return std::pow(a, b); };
    case Op::Maximum: return [](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); };
    case Op::Minimum: return [](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); };
    case Op::Eq: return [](double a, double b) { return a == b ? 1.0 : 0.0; };
    case Op::Ne: return [](double a, double b) { return a != b ? 1.0 : 0.0; };
    case Op::Lt: return [](double a, double b) { return a < b ? 1.0 : 0.0; };
    case Op::Le: return [](double a, double b) { return a <= b ? 1.0 : 0.0; };
    case Op::Gt: return [](double a, double b) { return a > b ? 1.0 : 0.0; };
    case Op::Ge: return [](double a, double b) { return a >= b ? 1.0 : 0.0; };
    case Op::LogicalAnd: return [](double a, double b) { return a != 0.0 && b != 0.0 ? 1.0 : 0.0; };
    case Op::LogicalOr: return [](double a, double b) { return a != 0.0 || b != 0.0 ? 1.0 : 0.0; };
    case Op::Remainder:  // Python-style: the result takes the sign of the divisor
      return [](double a, double b) {
        double r = std::fmod(a, b);
        return r != 0.0 && ((r < 0.0) != (b < 0.0)) ? r + b : r;
      };
    case Op::Fmod: return [](double a, double b) { return std::fmod(a, b); };
    default: fail(n, "not a binary pointwise op");
  }
}

// Operand `i` broadcast to the node's result shape (a literal fills it), cast as
// eager PyTorch casts it before computing (operand_cast).
std::vector<double> pointwise_operand(const Env& env, const Node& n, size_t i, DType comparison_dtype) {
  const Shape& out = n.result()->type.shape;
  std::optional<DType> cast = operand_cast(n, i, comparison_dtype);
  std::vector<double> v;
  if (!n.operands[i].is_value()) {
    v.assign(static_cast<size_t>(numel(out)), n.operands[i].literal.as_double());
  } else {
    const HostTensor& t = value_of(env, n, i);
    if (!broadcasts_to(t.shape, out)) fail(n, "operand shape " + shape_str(t.shape) + " does not broadcast to " + shape_str(out));
    v = gather(t.data, strided_offsets(out, broadcast_strides(t.shape, out)));
  }
  if (cast)
    for (double& x : v) x = round_to_dtype(x, *cast);
  return v;
}

HostTensor eval_pointwise(const Node& n, const Env& env) {
  HostTensor out = result_tensor(n);
  DType cmp = is_comparison(n.op) ? common_dtype(n) : out.dtype;
  std::vector<std::vector<double>> args;
  for (size_t i = 0; i < n.operands.size(); ++i) args.push_back(pointwise_operand(env, n, i, cmp));
  size_t count = out.data.size();
  switch (n.operands.size()) {
    case 1: {
      if (n.op == Op::Full) {
        if (n.operands[0].is_value() && !n.operands[0].value->type.shape.empty()) fail(n, "operand must be 0-d");
        out.data = args[0];
        break;
      }
      UnaryFn f = unary_fn(n);
      for (size_t k = 0; k < count; ++k) out.data[k] = f(args[0][k]);
      break;
    }
    case 2: {
      BinaryFn f = binary_fn(n);
      for (size_t k = 0; k < count; ++k) out.data[k] = f(args[0][k], args[1][k]);
      break;
    }
    case 3:
      if (n.op != Op::Where) fail(n, "not a ternary pointwise op");
      for (size_t k = 0; k < count; ++k) out.data[k] = args[0][k] != 0.0 ? args[1][k] : args[2][k];
      break;
    default:
      fail(n, "unexpected operand count " + std::to_string(n.operands.size()));
  }
  return out;
}

// ---------------------------------------------------------------- reductions

// One row of a sum/mean/prod/amax/amin/any/var/logsumexp reduction, accumulated in double.
double reduce_row(const Node& n, const std::vector<double>& x, const int64_t* offs, int64_t len) {
  auto at = [&](int64_t k) { return x[static_cast<size_t>(offs[k])]; };
  switch (n.op) {
    case Op::Sum: case Op::Mean: {
      double s = 0.0;
      for (int64_t k = 0; k < len; ++k) s += at(k);
      return n.op == Op::Sum ? s : s / static_cast<double>(len);
    }
    case Op::Prod: {
      double p = 1.0;
      for (int64_t k = 0; k < len; ++k) p *= at(k);
      return p;
    }
    case Op::Amax: case Op::Amin: {
      if (len == 0) fail(n, "reduction over an empty dimension");
      double m = at(0);
      for (int64_t k = 1; k < len && !std::isnan(m); ++k) {
        double v = at(k);
        if (std::isnan(v) || (n.op == Op::Amax ? v > m : v < m)) m = v;
      }
      return m;
    }
    case Op::Any: {
      for (int64_t k = 0; k < len; ++k)
        if (at(k) != 0.0) return 1.0;
      return 0.0;
    }
    case Op::Logsumexp: {
      // ATen's form: m = max (0 where infinite), log(sum(exp(x - m))) + m.
      double m = -kInf;
      for (int64_t k = 0; k < len; ++k) m = std::isnan(m) || std::isnan(at(k)) ? kNaN : std::max(m, at(k));
      if (std::isinf(m)) m = 0.0;
      double s = 0.0;
      for (int64_t k = 0; k < len; ++k) s += std::exp(at(k) - m);
      return std::log(s) + m;
    }
    case Op::Var: {
      double mean = 0.0, ss = 0.0;
      for (int64_t k = 0; k < len; ++k) mean += at(k);
      mean /= static_cast<double>(len);
      for (int64_t k = 0; k < len; ++k) ss += (at(k) - mean) * (at(k) - mean);
      int64_t dof = std::max<int64_t>(0, len - n.attr_int_or("correction", 1));
      return ss / static_cast<double>(dof);  // 0/0 = NaN, like PyTorch
    }
    default: fail(n, "not a reduction");
  }
}

HostTensor eval_reduction(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> dims = n.has_attr("dims") ? n.attr_ints("dims") : std::vector<int64_t>{};
  Rows rows = rows_over(x.shape, dim_mask(n, rank, dims));
  if (rows.count != static_cast<int64_t>(out.data.size())) fail(n, "result has the wrong number of elements");
  for (int64_t r = 0; r < rows.count; ++r) out.data[r] = reduce_row(n, x.data, rows.row(r), rows.length);
  return out;
}

// argmax/argmin over `dim` (or the flattened tensor): the first index of the
// extreme value, where a NaN beats everything (ATen's NaN-propagating compare).
HostTensor eval_arg_reduction(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> mask(static_cast<size_t>(rank), true);
  if (n.has_attr("dim")) mask = dim_mask(n, rank, {n.attr_int("dim")});
  Rows rows = rows_over(x.shape, mask);
  if (rows.count != static_cast<int64_t>(out.data.size())) fail(n, "result has the wrong number of elements");
  bool is_max = n.op == Op::Argmax;
  for (int64_t r = 0; r < rows.count; ++r) {
    if (rows.length == 0) fail(n, "reduction over an empty dimension");
    const int64_t* offs = rows.row(r);
    int64_t best = 0;
    double bv = x.data[offs[0]];
    for (int64_t k = 1; k < rows.length && !std::isnan(bv); ++k) {
      double v = x.data[offs[k]];
      if (std::isnan(v) || (is_max ? v > bv : v < bv)) best = k, bv = v;
    }
    out.data[r] = static_cast<double>(best);
  }
  return out;
}

// softmax / log_softmax along `dim`, and cumsum along `dim`: row-wise maps
// whose output has the input's shape, so a row's offsets address both.
HostTensor eval_along_dim(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  if (out.shape != x.shape) fail(n, "result shape " + shape_str(out.shape) + " differs from the input's " + shape_str(x.shape));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  Rows rows = rows_over(x.shape, dim_mask(n, rank, {n.attr_int("dim")}));
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    auto in = [&](int64_t k) { return x.data[offs[k]]; };
    auto put = [&](int64_t k, double v) { out.data[offs[k]] = v; };
    if (n.op == Op::Cumsum) {
      double s = 0.0;
      for (int64_t k = 0; k < rows.length; ++k) put(k, s += in(k));
      continue;
    }
    double m = -kInf, sum = 0.0;  // max (NaN-propagating), then the sum of exp(x - max)
    for (int64_t k = 0; k < rows.length; ++k) m = std::isnan(m) || std::isnan(in(k)) ? kNaN : std::max(m, in(k));
    for (int64_t k = 0; k < rows.length; ++k) sum += std::exp(in(k) - m);
    for (int64_t k = 0; k < rows.length; ++k)
      put(k, n.op == Op::Softmax ? std::exp(in(k) - m) / sum : in(k) - m - std::log(sum));
  }
  return out;
}

// layer_norm(x, weight, bias) over the trailing `ndims` dims: population
// variance, (x - mean) / sqrt(var + eps) * weight + bias.
HostTensor eval_layer_norm(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size()), nd = n.attr_int("ndims");
  if (nd < 1 || nd > rank) fail(n, "ndims " + std::to_string(nd) + " out of range for rank " + std::to_string(rank));
  double eps = n.attr_float("eps");
  Shape norm(x.shape.end() - nd, x.shape.end());
  // weight and bias, indexed by the position within a row (row-major over the normalized dims)
  auto affine = [&](size_t i) {
    if (!n.operands.at(i).is_value()) return std::vector<double>(static_cast<size_t>(numel(norm)), n.operands[i].literal.as_double());
    const HostTensor& t = value_of(env, n, i);
    if (t.shape != norm) fail(n, "weight/bias shape " + shape_str(t.shape) + " != normalized shape " + shape_str(norm));
    return t.data;
  };
  std::vector<double> w = affine(1), b = affine(2);
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  std::fill(mask.end() - nd, mask.end(), true);
  Rows rows = rows_over(x.shape, mask);
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    double mean = 0.0, var = 0.0;
    for (int64_t k = 0; k < rows.length; ++k) mean += x.data[offs[k]];
    mean /= static_cast<double>(rows.length);
    for (int64_t k = 0; k < rows.length; ++k) var += (x.data[offs[k]] - mean) * (x.data[offs[k]] - mean);
    var /= static_cast<double>(rows.length);
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < rows.length; ++k) out.data[offs[k]] = (x.data[offs[k]] - mean) * rstd * w[k] + b[k];
  }
  return out;
}

// ---------------------------------------------------------------- matmul

// mm / bmm / addmm(bias, a, b) = beta * bias + alpha * (a @ b), accumulated in double.
HostTensor eval_matmul(const Node& n, const Env& env) {
  bool addmm = n.op == Op::Addmm;
  const HostTensor& a = value_of(env, n, addmm ? 1 : 0);
  const HostTensor& b = value_of(env, n, addmm ? 2 : 1);
  HostTensor out = result_tensor(n);
  size_t rank = n.op == Op::Bmm ? 3 : 2;
  if (a.shape.size() != rank || b.shape.size() != rank || a.shape[rank - 1] != b.shape[rank - 2] ||
      (rank == 3 && a.shape[0] != b.shape[0]))
    fail(n, "operand shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) + " do not fit");
  int64_t batch = rank == 3 ? a.shape[0] : 1, M = a.shape[rank - 2], K = a.shape[rank - 1], N = b.shape[rank - 1];
  Shape expect = rank == 3 ? Shape{batch, M, N} : Shape{M, N};
  if (out.shape != expect) fail(n, "result shape " + shape_str(out.shape) + " != " + shape_str(expect));
  double alpha = addmm && n.has_attr("alpha") ? n.attr_float("alpha") : 1.0;
  double beta = addmm && n.has_attr("beta") ? n.attr_float("beta") : 1.0;
  std::vector<double> bias;
  if (addmm && beta != 0.0) {  // beta == 0 ignores the bias, NaNs included (as PyTorch does)
    const HostTensor& t = value_of(env, n, 0);
    if (!broadcasts_to(t.shape, out.shape)) fail(n, "bias " + shape_str(t.shape) + " does not broadcast to " + shape_str(out.shape));
    bias = gather(t.data, strided_offsets(out.shape, broadcast_strides(t.shape, out.shape)));
  }
  for (int64_t p = 0; p < batch; ++p) {
    const double* A = a.data.data() + p * M * K;
    const double* B = b.data.data() + p * K * N;
    double* C = out.data.data() + p * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
        int64_t o = i * N + j;
        C[o] = bias.empty() ? alpha * acc : beta * bias[static_cast<size_t>(p * M * N + o)] + alpha * acc;
      }
  }
  return out;
}

// ---------------------------------------------------------------- layout

HostTensor eval_layout(const Node& n, const Env& env) {
  HostTensor out = result_tensor(n);
  if (n.op == Op::Cat) {  // each operand fills a block of the result along `dim`
    int64_t rank = static_cast<int64_t>(out.shape.size());
    int64_t d = normalize_dim(n.attr_int("dim"), rank);
    Shape out_strides = contiguous_strides(out.shape);
    int64_t pos = 0;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const HostTensor& t = value_of(env, n, i);
      Shape expect = out.shape;
      expect[d] = t.shape.size() == out.shape.size() ? t.shape[d] : -1;
      if (t.shape != expect || pos + t.shape[d] > out.shape[d])
        fail(n, "operand " + std::to_string(i) + " shape " + shape_str(t.shape) + " does not fit the result " + shape_str(out.shape));
      Offsets dst = strided_offsets(t.shape, out_strides, pos * out_strides[d]);
      for (size_t k = 0; k < dst.size(); ++k) out.data[static_cast<size_t>(dst[k])] = t.data[k];
      pos += t.shape[d];
    }
    if (pos != out.shape[d]) fail(n, "operands fill " + std::to_string(pos) + " of " + std::to_string(out.shape[d]) + " rows");
    return out;
  }
  const HostTensor& x = value_of(env, n, 0);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  Shape cs = contiguous_strides(x.shape);
  Shape shape, strides;  // the view of x that the result reads, in the result's row-major order
  int64_t base = 0;
  switch (n.op) {
    case Op::View: case Op::Unsqueeze: case Op::Squeeze:  // row-major order is unchanged
      if (numel(out.shape) != numel(x.shape)) fail(n, "cannot reshape " + shape_str(x.shape) + " to " + shape_str(out.shape));
      out.data = x.data;
      return out;
    case Op::Permute: {
      auto dims = n.attr_ints("dims");
      if (static_cast<int64_t>(dims.size()) != rank) fail(n, "dims does not match the rank");
      for (int64_t dim : dims) {
        int64_t nd = normalize_dim(dim, rank);
        shape.push_back(x.shape[nd]);
        strides.push_back(cs[nd]);
      }
      break;
    }
    case Op::Expand:
      if (!broadcasts_to(x.shape, out.shape)) fail(n, "cannot expand " + shape_str(x.shape) + " to " + shape_str(out.shape));
      shape = out.shape;
      strides = broadcast_strides(x.shape, out.shape);
      break;
    case Op::Slice: {
      SliceBounds b = slice_bounds(n, x.shape);
      shape = x.shape;
      strides = cs;
      shape[b.dim] = b.size;
      strides[b.dim] *= b.step;
      base = b.start * cs[b.dim];
      break;
    }
    case Op::Select: {
      int64_t d = normalize_dim(n.attr_int("dim"), rank), idx = n.attr_int("index");
      if (idx < -x.shape[d] || idx >= x.shape[d]) fail(n, "index " + std::to_string(idx) + " out of range for size " + std::to_string(x.shape[d]));
      if (idx < 0) idx += x.shape[d];
      shape = x.shape;
      strides = cs;
      shape.erase(shape.begin() + d);
      strides.erase(strides.begin() + d);
      base = idx * cs[d];
      break;
    }
    default:
      fail(n, "not a layout op");
  }
  if (shape != out.shape) fail(n, "result shape " + shape_str(out.shape) + " != " + shape_str(shape));
  out.data = gather(x.data, strided_offsets(shape, strides, base));
  return out;
}

// ---------------------------------------------------------------- driver

HostTensor eval_node(const Node& n, const Env& env) {
  switch (op_kind(n.op)) {
    case OpKind::Pointwise: return eval_pointwise(n, env);
    case OpKind::Reduction:
      switch (n.op) {
        case Op::Argmax: case Op::Argmin: return eval_arg_reduction(n, env);
        case Op::Softmax: case Op::LogSoftmax: return eval_along_dim(n, env);
        case Op::LayerNorm: return eval_layer_norm(n, env);
        default: return eval_reduction(n, env);
      }
    case OpKind::Scan: return eval_along_dim(n, env);
    case OpKind::Matmul: return eval_matmul(n, env);
    case OpKind::Layout: return eval_layout(n, env);
    case OpKind::Conv: case OpKind::Opaque: break;
  }
  fail(n, "has no reference semantics in the interpreter");
}

// The declared result type is authoritative, but must agree with the op's
// shape rule: that keeps every index computed above in bounds.
void check_result_shape(const Node& n) {
  if (n.results.size() != 1) fail(n, "expected exactly one result");
  std::vector<TensorType> inferred;
  try {
    inferred = infer_result_types(n);
  } catch (const IRError& e) {
    fail(n, e.what());
  }
  if (inferred.at(0).shape != n.result()->type.shape)
    fail(n, "declared shape " + shape_str(n.result()->type.shape) + " contradicts the op's rule " + shape_str(inferred[0].shape));
}

void check_input(const Value& v, const HostTensor& t) {
  if (t.shape != v.type.shape || t.dtype != v.type.dtype)
    throw IRError("interp: input '%" + v.name + "' expects " + type_str(v.type.dtype, v.type.shape) + ", got " +
                  type_str(t.dtype, t.shape));
  if (static_cast<int64_t>(t.data.size()) != numel(t.shape))
    throw IRError("interp: input '%" + v.name + "' has " + std::to_string(t.data.size()) + " values for shape " +
                  shape_str(t.shape));
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

bool is_interpretable(const Graph& g, std::string* why) {
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    if (n.op != Op::Opaque && n.op != Op::Convolution) continue;
    if (why) {
      std::string name = n.results.empty() ? "" : "%" + n.result()->name + " = ";
      std::string target = n.op == Op::Opaque && n.has_attr("target") ? " (target " + n.attr_string("target") + ")" : "";
      *why = "node " + name + std::string(op_name(n.op)) + target + ": op '" + std::string(op_name(n.op)) +
             "' has no reference semantics in the interpreter";
    }
    return false;
  }
  if (why) why->clear();
  return true;
}

std::vector<HostTensor> run(const Graph& g, const std::vector<HostTensor>& inputs) {
  std::string why;
  if (!is_interpretable(g, &why)) throw IRError("interp: " + why);
  if (inputs.size() != g.inputs().size())
    throw IRError("interp: graph @" + g.name + " takes " + std::to_string(g.inputs().size()) + " inputs, got " +
                  std::to_string(inputs.size()));
  Env env;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_input(*g.inputs()[i], inputs[i]);
    env[g.inputs()[i]] = inputs[i];
  }
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    check_result_shape(n);
    HostTensor out = eval_node(n, env);
    for (double& v : out.data) v = round_to_dtype(v, out.dtype);
    env[n.result()] = std::move(out);
  }
  auto lookup = [&](const Value* v) -> const HostTensor& {
    auto it = env.find(v);
    if (it == env.end()) throw IRError("interp: '%" + v->name + "' is not defined in the graph");
    return it->second;
  };
  std::vector<HostTensor> results;
  for (const Value* v : g.outputs()) results.push_back(lookup(v));
  for (const auto& m : g.mutations()) results.push_back(lookup(m.value));
  return results;
}

HostTensor random_tensor(const TensorType& type, uint64_t seed) {
  HostTensor t;
  t.dtype = type.dtype;
  t.shape = type.shape;
  t.data.resize(static_cast<size_t>(numel(type.shape)));
  uint64_t state = seed;
  for (double& v : t.data) {
    uint64_t r = splitmix64(state);
    if (is_floating(type.dtype)) {
      v = round_to_dtype(-2.0 + 4.0 * static_cast<double>(r >> 11) * 0x1.0p-53, type.dtype);
      if (v >= 2.0) v = -2.0;  // rounding to a narrow dtype can reach 2; keep [-2, 2)
    } else if (is_integral(type.dtype)) {
      v = static_cast<double>(r >> 61);  // [0, 8)
    } else {
      v = static_cast<double>(r >> 63);
    }
  }
  return t;
}

std::vector<HostTensor> random_inputs(const Graph& g, uint64_t seed) {
  std::vector<HostTensor> out;
  uint64_t state = seed;
  for (const Value* v : g.inputs()) out.push_back(random_tensor(v->type, splitmix64(state)));
  return out;
}

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size())
    throw IRError("max_abs_diff: shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) + " differ");
  double m = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return kInf;
      continue;
    }
    if (x != y) m = std::max(m, std::fabs(x - y));  // x != y: equal infinities differ by 0
  }
  return m;
}

bool allclose(const HostTensor& a, const HostTensor& b, double rtol, double atol) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return false;
      continue;
    }
    if (x == y) continue;
    if (std::isinf(x) || std::isinf(y)) return false;  // infinities must match exactly
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

}  // namespace ff::interp
