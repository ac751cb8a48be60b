#include "ir/op.h"

#include <array>

namespace ff {

namespace {
constexpr OpInfo kOps[] = {
#define FF_OP(e, name, kind, n) {Op::e, name, OpKind::kind, n},
#include "ir/ops.def"
#undef FF_OP
};
}  // namespace

const OpInfo& op_info(Op op) { return kOps[static_cast<size_t>(op)]; }

size_t op_count() { return sizeof kOps / sizeof kOps[0]; }

std::optional<Op> parse_op(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Pointwise: return "pointwise";
    case OpKind::Reduction: return "reduction";
    case OpKind::Scan: return "scan";
    case OpKind::Matmul: return "matmul";
    case OpKind::Conv: return "conv";
    case OpKind::Layout: return "layout";
    case OpKind::Opaque: return "opaque";
  }
  return "?";
}

}  // namespace ff
