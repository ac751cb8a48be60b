#pragma once
// IR ops: the enum and the per-op facts of ops.def (see there for the row format).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ff {

enum class OpKind : uint8_t { Pointwise, Reduction, Window, Scan, Matmul, Conv, Layout, Opaque };

// How an op's result dtype follows from its operands (ir/type_rules.h applies it).
enum class ResultDType : uint8_t {
  Declared,     // the node states it (cast, full; sum, prod, cumsum, cumprod, softmax carry torch's dtype=)
  Promote,      // PyTorch's result_type of the operands
  PromoteTail,  // result_type of every operand but the first (where's condition)
  Float,        // result_type, with integral and bool promoted to the default float f32
  Compare,      // bool; computed in the operands' result_type
  Logical,      // bool; computed on the operands' truth values
  Index,        // i64 (argmax, argmin)
  First,        // the first operand's dtype (layer_norm, convolution)
};

enum class Op : uint16_t {
#define FF_OP(e, name, kind, n, rdt, aten) e,
#include "ir/ops.def"
#undef FF_OP
};

struct OpInfo {
  Op op;
  std::string_view name;
  OpKind kind;
  int num_operands;  // -1: variadic
  ResultDType result_dtype;
  std::string_view aten;  // ATen overloads it maps from 1:1 ("name.overload ..."), or ""
};

const OpInfo& op_info(Op op);
std::optional<Op> parse_op(std::string_view name);
inline std::string_view op_name(Op op) { return op_info(op).name; }
inline OpKind op_kind(Op op) { return op_info(op).kind; }
std::string_view op_kind_name(OpKind k);
std::string_view result_dtype_name(ResultDType r);  // "promote", "compare", ...
// A scan's combining op (ops.def's FF_SCAN: add for cumsum, mul for cumprod);
// none for other ops.
std::optional<Op> scan_combine(Op op);
// Ops in ops.def; Op values are 0 .. kNumOps - 1.
constexpr size_t kNumOps = 0
#define FF_OP(e, name, kind, n, rdt, aten) +1
#include "ir/ops.def"
#undef FF_OP
    ;

}  // namespace ff
