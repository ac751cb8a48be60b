#include "ir/op.h"

namespace ff {

namespace {
constexpr OpInfo kOps[] = {
#define FF_OP(e, name, kind, n, rdt, aten) {Op::e, name, OpKind::kind, n, ResultDType::rdt, aten},
#include "ir/ops.def"
#undef FF_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps);
}  // namespace

const OpInfo& op_info(Op op) { return kOps[static_cast<size_t>(op)]; }

std::optional<Op> parse_op(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::optional<Op> scan_combine(Op op) {
#define FF_OP(e, name, kind, n, rdt, aten)
#define FF_SCAN(e, combine) \
  if (op == Op::e) return Op::combine;
#include "ir/ops.def"
#undef FF_SCAN
#undef FF_OP
  return std::nullopt;
}

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Pointwise:
      return "pointwise";
    case OpKind::Reduction:
      return "reduction";
    case OpKind::Window:
      return "window";
    case OpKind::Scan:
      return "scan";
    case OpKind::Matmul:
      return "matmul";
    case OpKind::Conv:
      return "conv";
    case OpKind::Layout:
      return "layout";
    case OpKind::Opaque:
      return "opaque";
  }
  return "?";
}

std::string_view result_dtype_name(ResultDType r) {
  switch (r) {
    case ResultDType::Declared:
      return "declared";
    case ResultDType::Promote:
      return "promote";
    case ResultDType::PromoteTail:
      return "promote_tail";
    case ResultDType::Float:
      return "float";
    case ResultDType::Compare:
      return "compare";
    case ResultDType::Logical:
      return "logical";
    case ResultDType::Index:
      return "index";
    case ResultDType::First:
      return "first";
  }
  return "?";
}

}  // namespace ff
