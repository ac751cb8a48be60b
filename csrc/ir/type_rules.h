#pragma once
// Result dtypes: the op's ResultDType rule (ops.def) over PyTorch's type
// promotion (dtype.h's promote_types). Written once here for the verifier,
// the interpreter, pointwise codegen and, through the bindings, capture.
#include <optional>
#include <vector>

#include "ir/dtype.h"
#include "ir/op.h"

namespace ff {

class Node;
struct Operand;

// One entry per operand, in order; nullopt for an operand the caller leaves
// out (capture promotes tensor operands without their literals).
using PromotionOperands = std::vector<std::optional<PromotionOperand>>;

// Whether operand `i` of `op` takes part in its type promotion (not where's
// condition, which is a truth value).
bool promotes_operand(Op op, size_t i);
// result_type of the operands `op` promotes (every one; where: all but its
// condition): the dtype eager PyTorch converts them to before computing.
std::optional<DType> common_dtype(Op op, const PromotionOperands& operands);
// The result dtype by `op`'s rule; nullopt for a Declared rule, or when no
// operand decides it.
std::optional<DType> result_dtype(Op op, const PromotionOperands& operands);

// How an operand of a node takes part: a literal is a Python number, a 0-d
// value (a `scalar` input too) a zero-dim tensor.
PromotionOperand promotion_operand(const Operand& o);
PromotionOperands promotion_operands(const Node& n);
// The dtype a node computes in, before rounding to its result: comparisons
// in their operands' common dtype, logical ops in bool, others in the result's.
DType operand_dtype(const Node& n);

}  // namespace ff
