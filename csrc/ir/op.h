#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ff {

enum class OpKind : uint8_t { Pointwise, Reduction, Scan, Matmul, Conv, Layout, Opaque };

enum class Op : uint16_t {
#define FF_OP(e, name, kind, n) e,
#include "ir/ops.def"
#undef FF_OP
};

struct OpInfo {
  Op op;
  std::string_view name;
  OpKind kind;
  int num_operands;  // -1: variadic
};

const OpInfo& op_info(Op op);
size_t op_count();  // ops in ops.def; Op values are 0 .. op_count() - 1
std::optional<Op> parse_op(std::string_view name);
inline std::string_view op_name(Op op) { return op_info(op).name; }
inline OpKind op_kind(Op op) { return op_info(op).kind; }
std::string_view op_kind_name(OpKind k);

}  // namespace ff
