#include "ir/dtype.h"

#include <cmath>
#include <cstring>

namespace ff {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64, DType::i32, DType::boolean})
    if (dtype_name(t) == n) return t;
  return std::nullopt;
}

int dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}
bool is_integral(DType t) { return t == DType::i64 || t == DType::i32; }

DType compute_dtype(DType t) {
  return (t == DType::f16 || t == DType::bf16) ? DType::f32 : t;
}

namespace {
int rank(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::i32: return 1;
    case DType::i64: return 2;
    case DType::f16: return 3;
    case DType::bf16: return 3;
    case DType::f32: return 4;
    case DType::f64: return 5;
  }
  return 0;
}
}  // namespace

DType promote(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 promotes to f32 in PyTorch.
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return rank(a) >= rank(b) ? a : b;
}

namespace {
// Round-to-nearest-even of a float to a narrower mantissa, keeping the f32 exponent range.
float round_mantissa(float x, int drop_bits) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / nan unchanged
  uint32_t lsb = (u >> drop_bits) & 1u;
  uint32_t bias = (1u << (drop_bits - 1)) - 1u + lsb;
  u += bias;
  u &= ~((1u << drop_bits) - 1u);
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

double round_to_half(double v) {
  if (std::isnan(v) || std::isinf(v)) return v;
  const double max_half = 65504.0;
  double a = std::fabs(v);
  // Values that round past the largest half become inf.
  if (a >= 65520.0) return std::copysign(INFINITY, v);
  if (a > max_half) return std::copysign(max_half, v);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // Spacing of halfs near a: 2^(e-11) for normals, 2^-24 for subnormals.
  int exp_spacing = std::max(e - 11, -24);
  double q = std::ldexp(1.0, exp_spacing);
  double r = std::nearbyint(a / q) * q;  // default rounding mode: to nearest even
  return std::copysign(r, v);
}
}  // namespace

double round_to_dtype(double v, DType t) {
  switch (t) {
    case DType::f64: return v;
    case DType::f32: return static_cast<double>(static_cast<float>(v));
    case DType::bf16: return round_mantissa(static_cast<float>(v), 16);
    case DType::f16: return round_to_half(v);
    case DType::i64: return std::isfinite(v) ? static_cast<double>(static_cast<int64_t>(v)) : 0.0;
    case DType::i32: return std::isfinite(v) ? static_cast<double>(static_cast<int32_t>(v)) : 0.0;
    case DType::boolean: return v != 0.0 ? 1.0 : 0.0;
  }
  return v;
}

}  // namespace ff
