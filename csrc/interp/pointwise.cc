// Pointwise evaluation: every operand broadcast to the result shape and cast
// as eager PyTorch casts it before computing, then the op's arithmetic (ops.cc)
// applied element by element in double.
#include <optional>

#include "interp/eval.h"
#include "ir/type_rules.h"

namespace ff::interp {

namespace {

// The dtype operand `i` is cast to before the op computes, as eager PyTorch
// does: comparisons cast both sides to their common dtype; logical ops, casts
// and where's condition look at the operand's own value. Arithmetic with a
// floating result casts tensors to the result dtype and takes literals and
// scalar inputs (Python numbers) in its compute type (f32 for f16/bf16).
std::optional<DType> operand_cast(const Node& n, size_t i) {
  ResultDType rule = op_info(n.op).result_dtype;
  if (rule == ResultDType::Compare) return operand_dtype(n);
  if (rule == ResultDType::Logical || !promotes_operand(n.op, i) || n.op == Op::Cast) return std::nullopt;
  DType result = n.result()->type.dtype;
  if (!is_floating(result)) return std::nullopt;
  const Operand& o = n.operands[i];
  bool python_number = !o.is_value() || o.value->input_kind == InputKind::Scalar;
  return python_number ? compute_dtype(result) : result;
}

// Operand `i` broadcast to the node's result shape (a literal fills it), cast
// as eager PyTorch casts it before computing (operand_cast).
std::vector<double> pointwise_operand(const Env& env, const Node& n, size_t i) {
  const Shape& out = n.result()->type.shape;
  std::optional<DType> cast = operand_cast(n, i);
  std::vector<double> v;
  if (!n.operands[i].is_value()) {
    v.assign(static_cast<size_t>(numel(out)), n.operands[i].literal.as_double());
  } else {
    const HostTensor& t = value_of(env, n, i);
    if (!broadcasts_to(t.shape, out))
      fail(n, "operand shape " + shape_str(t.shape) + " does not broadcast to " + shape_str(out));
    v = gather(t.data, strided_offsets(out, broadcast_strides(t.shape, out)));
  }
  if (cast)
    for (double& x : v) x = round_to_dtype(x, *cast);
  return v;
}

std::vector<std::vector<double>> pointwise_operands(const Node& n, const Env& env, size_t arity) {
  if (n.operands.size() != arity)
    fail(n, "takes " + std::to_string(arity) + " operands, got " + std::to_string(n.operands.size()));
  std::vector<std::vector<double>> args;
  for (size_t i = 0; i < arity; ++i) args.push_back(pointwise_operand(env, n, i));
  return args;
}

}  // namespace

HostTensor map_unary(const Node& n, const Env& env, double (*f)(double)) {
  HostTensor out = result_tensor(n);
  auto a = pointwise_operands(n, env, 1);
  for (size_t k = 0; k < out.data.size(); ++k) out.data[k] = f(a[0][k]);
  return out;
}

HostTensor map_binary(const Node& n, const Env& env, double (*f)(double, double)) {
  HostTensor out = result_tensor(n);
  auto a = pointwise_operands(n, env, 2);
  for (size_t k = 0; k < out.data.size(); ++k) out.data[k] = f(a[0][k], a[1][k]);
  return out;
}

HostTensor map_ternary(const Node& n, const Env& env, double (*f)(double, double, double)) {
  HostTensor out = result_tensor(n);
  auto a = pointwise_operands(n, env, 3);
  for (size_t k = 0; k < out.data.size(); ++k) out.data[k] = f(a[0][k], a[1][k], a[2][k]);
  return out;
}

HostTensor eval_full(const Node& n, const Env& env) {
  if (n.operands.size() == 1 && n.operands[0].is_value() && !n.operands[0].value->type.shape.empty())
    fail(n, "operand must be 0-d");
  return map_unary(n, env, [](double x) { return x; });
}

}  // namespace ff::interp
