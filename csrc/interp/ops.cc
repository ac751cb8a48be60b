// Reference semantics of every IR op: what the interpreter computes for it,
// in double, before the driver rounds the result to its dtype. One switch
// with no default: a new op in ops.def does not build (-Werror=switch) until
// it has its entry here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>

#include "interp/eval.h"

namespace ff::interp {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

HostTensor eval_gelu(const Node& n, const Env& env) {
  std::string approx = n.has_attr("approximate") ? n.attr_string("approximate") : "none";
  if (approx == "none") return map_unary(n, env, gelu_erf);
  if (approx == "tanh") return map_unary(n, env, gelu_tanh);
  fail(n, "unknown approximate=\"" + approx + "\"");
}

// Max/min of a row, NaN-propagating (the first NaN wins).
template <bool kMax>
double extreme(const Node& n, const std::vector<double>& row) {
  if (row.empty()) fail(n, "reduction over an empty dimension");
  double m = row[0];
  for (size_t k = 1; k < row.size() && !std::isnan(m); ++k)
    if (std::isnan(row[k]) || (kMax ? row[k] > m : row[k] < m)) m = row[k];
  return m;
}

double row_sum(const std::vector<double>& row) {
  double s = 0.0;
  for (double v : row) s += v;
  return s;
}

// Python-style modulo: the result takes the sign of the divisor.
double python_remainder(double a, double b) {
  double r = std::fmod(a, b);
  return r != 0.0 && ((r < 0.0) != (b < 0.0)) ? r + b : r;
}

// Variance with the node's `correction` (default 1, Bessel's).
double variance(const Node& n, const std::vector<double>& row) {
  double mean = row_sum(row) / static_cast<double>(row.size()), ss = 0.0;
  for (double v : row) ss += (v - mean) * (v - mean);
  int64_t dof = std::max<int64_t>(0, static_cast<int64_t>(row.size()) - n.attr_int_or("correction", 1));
  return ss / static_cast<double>(dof);  // 0/0 = NaN, like PyTorch
}

// x as f32 rounded to tf32: 10 mantissa bits, to nearest, ties away from zero
// (adding half the dropped ulp to the bits carries into the exponent where it
// must); NaN stays NaN.
double round_tf32(double x) {
  const float f = static_cast<float>(x);
  if (std::isnan(f)) return x;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

// softmax / log_softmax of a row: the max (NaN-propagating), then the sum of exp(x - max).
template <bool kLog>
void softmax_row(const std::vector<double>& in, std::vector<double>& out) {
  double m = -kInf, sum = 0.0;
  for (double v : in) m = std::isnan(m) || std::isnan(v) ? kNaN : std::max(m, v);
  for (double v : in) sum += std::exp(v - m);
  for (size_t k = 0; k < in.size(); ++k) out[k] = kLog ? in[k] - m - std::log(sum) : std::exp(in[k] - m) / sum;
}

// ATen's logsumexp of a row: m = max (0 where infinite), log(sum(exp(x - m))) + m.
double logsumexp_row(const std::vector<double>& row) {
  double m = -kInf;
  for (double v : row) m = std::isnan(m) || std::isnan(v) ? kNaN : std::max(m, v);
  if (std::isinf(m)) m = 0.0;
  double s = 0.0;
  for (double v : row) s += std::exp(v - m);
  return std::log(s) + m;
}

}  // namespace

// Lambdas over the element values `x` (unary) or `a`, `b` (binary).
#define FF_UNARY(expr) [](const Node& n, const Env& env) { return map_unary(n, env, [](double x) { return (expr); }); }
#define FF_BINARY(expr) \
  [](const Node& n, const Env& env) { return map_binary(n, env, [](double a, double b) { return (expr); }); }
#define FF_BOOL(cond) ((cond) ? 1.0 : 0.0)
// A reduction over each row `row` of the node `n`.
#define FF_REDUCE(expr)                                                                               \
  [](const Node& n, const Env& env) {                                                                 \
    return reduce_rows(n, env, [](const Node& n, const std::vector<double>& row) { return (expr); }); \
  }

Evaluator reference_semantics(Op op) {
  switch (op) {
    case Op::Neg:
      return FF_UNARY(-x);
    case Op::Abs:
      return FF_UNARY(std::fabs(x));
    case Op::Exp:
      return FF_UNARY(std::exp(x));
    case Op::Log:
      return FF_UNARY(std::log(x));
    case Op::Log1p:
      return FF_UNARY(std::log1p(x));
    case Op::Expm1:
      return FF_UNARY(std::expm1(x));
    case Op::Sqrt:
      return FF_UNARY(std::sqrt(x));
    case Op::Rsqrt:
      return FF_UNARY(1.0 / std::sqrt(x));
    case Op::Sigmoid:
      return FF_UNARY(sigmoid(x));
    case Op::Tanh:
      return FF_UNARY(std::tanh(x));
    case Op::Relu:
      return FF_UNARY(std::isnan(x) ? x : x > 0.0 ? x : 0.0);
    case Op::Gelu:
      return eval_gelu;
    case Op::Silu:
      return FF_UNARY(x * sigmoid(x));
    case Op::Sin:
      return FF_UNARY(std::sin(x));
    case Op::Cos:
      return FF_UNARY(std::cos(x));
    case Op::Reciprocal:
      return FF_UNARY(1.0 / x);
    case Op::Erf:
      return FF_UNARY(std::erf(x));
    case Op::Floor:
      return FF_UNARY(std::floor(x));
    case Op::Ceil:
      return FF_UNARY(std::ceil(x));
    case Op::Trunc:
      return FF_UNARY(std::trunc(x));
    case Op::Round:
      return FF_UNARY(std::nearbyint(x));  // half to even
    case Op::Sign:
      return FF_UNARY(static_cast<double>((0.0 < x) - (x < 0.0)));  // as ATen: NaN gives 0
    case Op::LogicalNot:
      return FF_UNARY(FF_BOOL(x == 0.0));
    case Op::IsNan:
      return FF_UNARY(FF_BOOL(std::isnan(x)));
    case Op::Cast:
      return FF_UNARY(x);  // the result rounding converts
    case Op::Copy:
      return FF_UNARY(x);
    case Op::RoundTf32:
      return FF_UNARY(round_tf32(x));
    case Op::Add:
      return FF_BINARY(a + b);
    case Op::Sub:
      return FF_BINARY(a - b);
    case Op::Mul:
      return FF_BINARY(a * b);
    case Op::Div:
      return FF_BINARY(a / b);  // true division, also for integers
    case Op::Pow:
      return FF_BINARY(std::pow(a, b));
    case Op::Maximum:
      return FF_BINARY(std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b));
    case Op::Minimum:
      return FF_BINARY(std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b));
    case Op::Eq:
      return FF_BINARY(FF_BOOL(a == b));
    case Op::Ne:
      return FF_BINARY(FF_BOOL(a != b));
    case Op::Lt:
      return FF_BINARY(FF_BOOL(a < b));
    case Op::Le:
      return FF_BINARY(FF_BOOL(a <= b));
    case Op::Gt:
      return FF_BINARY(FF_BOOL(a > b));
    case Op::Ge:
      return FF_BINARY(FF_BOOL(a >= b));
    case Op::LogicalAnd:
      return FF_BINARY(FF_BOOL(a != 0.0 && b != 0.0));
    case Op::LogicalOr:
      return FF_BINARY(FF_BOOL(a != 0.0 || b != 0.0));
    case Op::Remainder:
      return FF_BINARY(python_remainder(a, b));
    case Op::Fmod:
      return FF_BINARY(std::fmod(a, b));
    case Op::Where:
      return [](const Node& n, const Env& env) {
        return map_ternary(n, env, [](double c, double a, double b) { return c != 0.0 ? a : b; });
      };
    case Op::Full:
      return eval_full;

    case Op::Sum:
      return FF_REDUCE(row_sum(row));
    case Op::Mean:
      return FF_REDUCE(row_sum(row) / static_cast<double>(row.size()));
    case Op::Amax:
      return FF_REDUCE(extreme<true>(n, row));
    case Op::Amin:
      return FF_REDUCE(extreme<false>(n, row));
    case Op::Prod:
      return FF_REDUCE(std::accumulate(row.begin(), row.end(), 1.0, std::multiplies<double>()));
    case Op::Var:
      return FF_REDUCE(variance(n, row));
    case Op::Any:
      return FF_REDUCE(FF_BOOL(std::any_of(row.begin(), row.end(), [](double v) { return v != 0.0; })));
    case Op::Logsumexp:
      return FF_REDUCE(logsumexp_row(row));
    case Op::Argmax:
      return [](const Node& n, const Env& env) { return arg_reduce(n, env, true); };
    case Op::Argmin:
      return [](const Node& n, const Env& env) { return arg_reduce(n, env, false); };
    case Op::Softmax:
      return [](const Node& n, const Env& env) { return map_rows_along_dim(n, env, softmax_row<false>); };
    case Op::LogSoftmax:
      return [](const Node& n, const Env& env) { return map_rows_along_dim(n, env, softmax_row<true>); };
    case Op::LayerNorm:
      return eval_layer_norm;
    case Op::MaxPool:
    case Op::AvgPool:
      return eval_pool;
    case Op::Cumsum:
    case Op::Cumprod:
      return eval_scan;

    case Op::Mm:
    case Op::Bmm:
    case Op::Addmm:
      return eval_matmul;
    case Op::Convolution:
      return eval_conv;

    case Op::View:
    case Op::Permute:
    case Op::Expand:
    case Op::Unsqueeze:
    case Op::Squeeze:
    case Op::Slice:
    case Op::Select:
    case Op::Cat:
    case Op::Flip:
      return eval_layout;
    case Op::Opaque:
      return nullptr;  // an ATen op the IR does not model
  }
  return nullptr;
}

#undef FF_UNARY
#undef FF_BINARY
#undef FF_BOOL
#undef FF_REDUCE

}  // namespace ff::interp
