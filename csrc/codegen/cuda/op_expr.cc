// The CUDA expression of every pointwise IR op (helpers it calls live in
// prelude.cc). One switch with no default: a new op in ops.def does not build
// (-Werror=switch) until it has its entry here.
#include "codegen/cuda/op_expr.h"

#include <cmath>
#include <cstdio>
#include <optional>

namespace ff::codegen {

std::string cuda_literal(const Scalar& s, DType t) {
  DType c = compute_dtype(t);
  char buf[64];
  if (c == DType::boolean) return s.as_double() != 0.0 ? "true" : "false";
  if (c == DType::i64 || c == DType::i32) {
    long long v = s.kind == Scalar::Kind::Float ? static_cast<long long>(s.f) : s.i;
    std::snprintf(buf, sizeof buf, "%lldLL", v);
    return c == DType::i32 ? "static_cast<int>(" + std::string(buf) + ")" : buf;
  }
  double v = s.as_double();
  if (c == DType::f32) {
    float f = static_cast<float>(v);
    if (std::isnan(f)) return "__int_as_float(0x7fffffff)";
    if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
    std::snprintf(buf, sizeof buf, "%.9gf", f);
    std::string r = buf;
    if (r.find_first_of(".e") == std::string::npos) r.insert(r.size() - 1, ".0");
    return r;
  }
  if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v))
    return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__longlong_as_double(0xfff0000000000000LL)";
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string r = buf;
  if (r.find_first_of(".e") == std::string::npos) r += ".0";
  return r;
}

namespace {

std::string math_fn(const char* name, DType c) { return c == DType::f32 ? std::string(name) + "f" : name; }

std::string pow_expr(const std::string& a, const Operand& exponent, const std::string& b, DType c) {
  // ATen's pow with a scalar exponent special-cases these exponents (pow_tensor_scalar).
  if (!exponent.is_value() && is_floating(c)) {
    double e = exponent.literal.as_double();
    std::string one = c == DType::f32 ? "1.0f" : "1.0";
    if (e == 2.0) return "(" + a + " * " + a + ")";
    if (e == 3.0) return "(" + a + " * " + a + " * " + a + ")";
    if (e == 0.5) return math_fn("sqrt", c) + "(" + a + ")";
    if (e == -0.5) return math_fn("rsqrt", c) + "(" + a + ")";
    if (e == -1.0) return "(" + one + " / " + a + ")";
    if (e == -2.0) return "(" + one + " / (" + a + " * " + a + "))";
  }
  return math_fn("pow", c) + "(" + a + ", " + b + ")";
}

// An f32 division by a literal d whose odd part D is below 2^20 (d = D 2^k,
// |k| <= 100) as ff_div_by_constant: x / d is exact or, x being M 2^a with
// M < 2^24, at least 2^-26 / D of itself away from the midpoints between
// floats, and x times 1/d in double errs by at most 2^-52 of it, so that
// one rounding to f32 gives the correctly rounded quotient, as div.rn does.
std::optional<std::string> div_by_constant(const Operand& divisor, const std::string& x, DType c) {
  if (c != DType::f32 || divisor.is_value()) return std::nullopt;
  const double d = static_cast<double>(static_cast<float>(divisor.literal.as_double()));
  if (!std::isfinite(d) || d == 0.0) return std::nullopt;
  int k = 0;
  double odd = std::frexp(std::fabs(d), &k);  // |d| = odd 2^k, odd in [0.5, 1)
  while (odd != std::floor(odd)) {
    odd *= 2;
    --k;
  }
  if (odd >= (1 << 20) || k < -100 || k > 100) return std::nullopt;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", 1.0 / d);
  return "ff_div_by_constant(" + x + ", " + buf + ")";
}

}  // namespace

std::string op_expr(const Node& n, const std::vector<std::string>& a, DType c) {
  std::string fc = c == DType::f32 ? "f" : "";
  auto call = [&](const char* f) { return math_fn(f, c) + "(" + a[0] + ")"; };
  switch (n.op) {
    case Op::Neg:
      return "(-" + a[0] + ")";
    case Op::Abs:
      return is_floating(c) ? call("fabs") : "(" + a[0] + " < 0 ? -" + a[0] + " : " + a[0] + ")";
    case Op::Exp:
      return call("exp");
    case Op::Log:
      return call("log");
    case Op::Log1p:
      return call("log1p");
    case Op::Expm1:
      return call("expm1");
    case Op::Sqrt:
      return call("sqrt");
    case Op::Rsqrt:
      return call("rsqrt");
    case Op::Tanh:
      return call("tanh");
    case Op::Sin:
      return call("sin");
    case Op::Cos:
      return call("cos");
    case Op::Erf:
      return call("erf");
    case Op::Floor:
      return is_floating(c) ? call("floor") : a[0];
    case Op::Ceil:
      return is_floating(c) ? call("ceil") : a[0];
    case Op::Trunc:
      return is_floating(c) ? call("trunc") : a[0];
    case Op::Round:
      return is_floating(c) ? call("nearbyint") : a[0];
    case Op::Sigmoid:
      return "ff_sigmoid(" + a[0] + ")";
    case Op::Silu:
      return "ff_silu(" + a[0] + ")";
    case Op::Relu:
      return "ff_relu(" + a[0] + ")";
    case Op::Gelu: {
      bool tanh = n.has_attr("approximate") && n.attr_string("approximate") == "tanh";
      return (tanh ? "ff_gelu_tanh(" : "ff_gelu(") + a[0] + ")";
    }
    case Op::Sign:
      return "ff_sign(" + a[0] + ")";
    case Op::Reciprocal:
      return "(" + cuda_literal(Scalar::of_float(1.0), c) + " / " + a[0] + ")";
    case Op::LogicalNot:
      return "(!" + a[0] + ")";
    case Op::IsNan:
      return "ff_isnan(" + a[0] + ")";
    case Op::Cast:
    case Op::Copy:
    case Op::Full:
      return a[0];
    case Op::RoundTf32:
      return c == DType::f32 ? "ff_round_tf32(" + a[0] + ")" : a[0];
    case Op::Add:
      return "(" + a[0] + " + " + a[1] + ")";
    case Op::Sub:
      return "(" + a[0] + " - " + a[1] + ")";
    case Op::Mul:
      return "(" + a[0] + " * " + a[1] + ")";
    case Op::Div:
      return div_by_constant(n.operands[1], a[0], c).value_or("(" + a[0] + " / " + a[1] + ")");
    case Op::Pow:
      return pow_expr(a[0], n.operands[1], a[1], c);
    case Op::Maximum:
      return "ff_maximum(" + a[0] + ", " + a[1] + ")";
    case Op::Minimum:
      return "ff_minimum(" + a[0] + ", " + a[1] + ")";
    case Op::Eq:
      return "(" + a[0] + " == " + a[1] + ")";
    case Op::Ne:
      return "(" + a[0] + " != " + a[1] + ")";
    case Op::Lt:
      return "(" + a[0] + " < " + a[1] + ")";
    case Op::Le:
      return "(" + a[0] + " <= " + a[1] + ")";
    case Op::Gt:
      return "(" + a[0] + " > " + a[1] + ")";
    case Op::Ge:
      return "(" + a[0] + " >= " + a[1] + ")";
    case Op::LogicalAnd:
      return "(" + a[0] + " && " + a[1] + ")";
    case Op::LogicalOr:
      return "(" + a[0] + " || " + a[1] + ")";
    case Op::Remainder:
      return "ff_remainder(" + a[0] + ", " + a[1] + ")";
    case Op::Fmod:
      return is_floating(c) ? math_fn("fmod", c) + "(" + a[0] + ", " + a[1] + ")" : "(" + a[0] + " % " + a[1] + ")";
    case Op::Where:
      return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";

    // Not pointwise: generated by their group kinds' schedulers, or library calls.
    case Op::Sum:
    case Op::Mean:
    case Op::Amax:
    case Op::Amin:
    case Op::Prod:
    case Op::Var:
    case Op::Any:
    case Op::Logsumexp:
    case Op::Argmax:
    case Op::Argmin:
    case Op::Softmax:
    case Op::LogSoftmax:
    case Op::LayerNorm:
    case Op::MaxPool:
    case Op::AvgPool:
    case Op::Cumsum:
    case Op::Cumprod:
    case Op::Mm:
    case Op::Bmm:
    case Op::Addmm:
    case Op::Convolution:
    case Op::View:
    case Op::Permute:
    case Op::Expand:
    case Op::Unsqueeze:
    case Op::Squeeze:
    case Op::Slice:
    case Op::Select:
    case Op::Cat:
    case Op::Flip:
    case Op::Opaque:
      break;
  }
  throw IRError("pointwise codegen: no CUDA expression for op '" + std::string(op_name(n.op)) + "'");
}

}  // namespace ff::codegen
