#include "ir/dtype.h"

#include <cmath>
#include <cstring>

namespace ff {

namespace {
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", 4, "float32", "at::kFloat"},       {DType::f16, "f16", 2, "float16", "at::kHalf"},
    {DType::bf16, "bf16", 2, "bfloat16", "at::kBFloat16"}, {DType::f64, "f64", 8, "float64", "at::kDouble"},
    {DType::i64, "i64", 8, "int64", "at::kLong"},          {DType::i32, "i32", 4, "int32", "at::kInt"},
    {DType::boolean, "bool", 1, "bool", "at::kBool"},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == kNumDTypes, "one row per DType");
constexpr bool in_enum_order() {
  for (size_t i = 0; i < kNumDTypes; ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kDTypes is indexed by DType");
}  // namespace

const DTypeInfo& dtype_info(DType t) { return kDTypes[static_cast<size_t>(t)]; }
const DTypeInfo* dtype_table() { return kDTypes; }

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> parse_dtype(std::string_view n) {
  for (const DTypeInfo& info : kDTypes)
    if (info.name == n) return info.dtype;
  return std::nullopt;
}

int dtype_size(DType t) { return dtype_info(t).size; }

bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64; }
bool is_integral(DType t) { return t == DType::i64 || t == DType::i32; }

DType compute_dtype(DType t) { return (t == DType::f16 || t == DType::bf16) ? DType::f32 : t; }

namespace {
int rank(DType t) {
  switch (t) {
    case DType::boolean:
      return 0;
    case DType::i32:
      return 1;
    case DType::i64:
      return 2;
    case DType::f16:
      return 3;
    case DType::bf16:
      return 3;
    case DType::f32:
      return 4;
    case DType::f64:
      return 5;
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

PromotionOperand PromotionOperand::number_of(DType category) {
  DType d = is_floating(category) ? DType::f32 : is_integral(category) ? DType::i64 : DType::boolean;
  return {Tier::Number, d};
}

namespace {
int category(DType d) { return is_floating(d) ? 2 : is_integral(d) ? 1 : 0; }

std::optional<DType> promote_opt(std::optional<DType> a, std::optional<DType> b) {
  if (!a) return b;
  if (!b) return a;
  return promote(*a, *b);
}

// ATen's combine_categories: the higher tier's type unless the lower one is of
// a higher category (bool tensor + int, int tensor + float).
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower || category(*higher) >= category(*lower)) return higher;
  return promote(*higher, *lower);
}
}  // namespace

std::optional<DType> promote_types(const std::vector<PromotionOperand>& operands) {
  std::optional<DType> tiers[3];
  for (const PromotionOperand& o : operands) {
    auto& slot = tiers[static_cast<size_t>(o.tier)];
    slot = promote_opt(slot, o.dtype);
  }
  return combine(tiers[0], combine(tiers[1], tiers[2]));
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
    case DType::f64:
      return v;
    case DType::f32:
      return static_cast<double>(static_cast<float>(v));
    case DType::bf16:
      return round_mantissa(static_cast<float>(v), 16);
    case DType::f16:
      return round_to_half(v);
    case DType::i64:
      return std::isfinite(v) ? static_cast<double>(static_cast<int64_t>(v)) : 0.0;
    case DType::i32:
      return std::isfinite(v) ? static_cast<double>(static_cast<int32_t>(v)) : 0.0;
    case DType::boolean:
      return v != 0.0 ? 1.0 : 0.0;
  }
  return v;
}

}  // namespace ff
