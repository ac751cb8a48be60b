#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ff {

enum class DType : uint8_t { f32, f16, bf16, f64, i64, i32, boolean };

std::string_view dtype_name(DType t);                       // "f32", "bool", ...
std::optional<DType> parse_dtype(std::string_view name);
int dtype_size(DType t);                                     // bytes per element
bool is_floating(DType t);
bool is_integral(DType t);                                   // bool excluded
// The type arithmetic on `t` is carried out in (as PyTorch's "opmath" type):
// f16/bf16 compute in f32, everything else in itself.
DType compute_dtype(DType t);
// Type promotion of two tensor operands (PyTorch's rules for same-category
// dimensioned tensors: the wider type wins; floating beats integral beats bool).
DType promote(DType a, DType b);
// Rounds a double to the nearest value representable in `t` (round to nearest
// even), the way storing into a tensor of that dtype would.
double round_to_dtype(double v, DType t);

}  // namespace ff
