#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ff {

enum class DType : uint8_t { f32, f16, bf16, f64, i64, i32, boolean };
constexpr size_t kNumDTypes = 7;

// The one dtype table: every other spelling of a dtype (Python's torch
// dtypes, emitted C++'s at::k* names) is read from here through the bindings.
struct DTypeInfo {
  DType dtype;
  std::string_view name;   // IR text: "f32", "bool", ...
  int size;                // bytes per element
  std::string_view torch;  // torch attribute: "float32" (torch.float32)
  std::string_view aten;   // c10 scalar type constant: "at::kFloat"
};
const DTypeInfo& dtype_info(DType t);
const DTypeInfo* dtype_table();  // kNumDTypes entries, in enum order

std::string_view dtype_name(DType t);  // "f32", "bool", ...
std::optional<DType> parse_dtype(std::string_view name);
int dtype_size(DType t);  // bytes per element
bool is_floating(DType t);
bool is_integral(DType t);  // bool excluded
// The type arithmetic on `t` is carried out in (as PyTorch's "opmath" type):
// f16/bf16 compute in f32, everything else in itself.
DType compute_dtype(DType t);
// Type promotion of two tensor operands (PyTorch's rules for same-category
// dimensioned tensors: the wider type wins; floating beats integral beats bool).
DType promote(DType a, DType b);

// One operand as PyTorch's result_type sees it. Dimensioned tensors decide the
// type; 0-d tensors and then Python numbers only where they are of a higher
// category (bool < integral < floating). A number's dtype is its category's
// default: bool, i64, or f32 for a float.
struct PromotionOperand {
  enum class Tier : uint8_t { Dimensioned, ZeroDim, Number } tier;
  DType dtype;
  static PromotionOperand number_of(DType category);  // a Python number of dtype's category
};
// PyTorch's result_type of `operands`; nullopt for none.
std::optional<DType> promote_types(const std::vector<PromotionOperand>& operands);

// Rounds a double to the nearest value representable in `t` (round to nearest
// even), the way storing into a tensor of that dtype would.
double round_to_dtype(double v, DType t);

}  // namespace ff
