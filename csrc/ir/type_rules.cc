#include "ir/type_rules.h"

#include "ir/graph.h"

namespace ff {

bool promotes_operand(Op op, size_t i) { return !(op_info(op).result_dtype == ResultDType::PromoteTail && i == 0); }

std::optional<DType> common_dtype(Op op, const PromotionOperands& operands) {
  std::vector<PromotionOperand> taking_part;
  for (size_t i = 0; i < operands.size(); ++i)
    if (operands[i] && promotes_operand(op, i)) taking_part.push_back(*operands[i]);
  return promote_types(taking_part);
}

std::optional<DType> result_dtype(Op op, const PromotionOperands& operands) {
  switch (op_info(op).result_dtype) {
    case ResultDType::Declared:
      return std::nullopt;
    case ResultDType::Compare:
    case ResultDType::Logical:
      return DType::boolean;
    case ResultDType::Index:
      return DType::i64;
    case ResultDType::First:
      if (operands.empty() || !operands[0]) return std::nullopt;
      return operands[0]->dtype;
    case ResultDType::Promote:
    case ResultDType::PromoteTail:
      return common_dtype(op, operands);
    case ResultDType::Float: {
      std::optional<DType> d = common_dtype(op, operands);
      if (d && !is_floating(*d)) d = DType::f32;  // ATen's promote_integer_inputs_to_float
      return d;
    }
  }
  return std::nullopt;
}

PromotionOperand promotion_operand(const Operand& o) {
  if (!o.is_value()) {
    DType category = o.literal.kind == Scalar::Kind::Float ? DType::f64
                     : o.literal.kind == Scalar::Kind::Int ? DType::i64
                                                           : DType::boolean;
    return PromotionOperand::number_of(category);
  }
  // A `scalar` input too: capture lifts a Python number only where the 0-d
  // tensor it traces as promotes as eager promotes the number.
  using Tier = PromotionOperand::Tier;
  return {o.value->type.shape.empty() ? Tier::ZeroDim : Tier::Dimensioned, o.value->type.dtype};
}

PromotionOperands promotion_operands(const Node& n) {
  PromotionOperands out;
  for (const Operand& o : n.operands) out.push_back(promotion_operand(o));
  return out;
}

DType operand_dtype(const Node& n) {
  switch (op_info(n.op).result_dtype) {
    case ResultDType::Compare:
      if (auto d = common_dtype(n.op, promotion_operands(n))) return *d;
      break;
    case ResultDType::Logical:
      return DType::boolean;
    default:
      break;
  }
  return n.result()->type.dtype;
}

}  // namespace ff
