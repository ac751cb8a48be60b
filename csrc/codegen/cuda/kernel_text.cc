#include "codegen/cuda/kernel_text.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "codegen/cuda/op_expr.h"
#include "ir/type_rules.h"

namespace ff::codegen {

namespace {

// The dtype a node computes in: its operands' common dtype for comparisons,
// bool for logical ops, its result's otherwise (type_rules.h), as opmath.
DType op_compute_dtype(const Node& n) { return compute_dtype(operand_dtype(n)); }

}  // namespace

std::string cuda_storage_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    case DType::f16:
      return "ff_half";
    case DType::bf16:
      return "ff_bf16";
    case DType::i64:
      return "long long";
    case DType::i32:
      return "int";
    case DType::boolean:
      return "bool";
  }
  return "?";
}
std::string cuda_compute_type(DType t) { return cuda_storage_type(compute_dtype(t)); }

void emit_pointwise_body(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                         std::unordered_map<const Value*, std::string>& expr_of) {
  int tmp = 0;
  emit_pointwise_nodes(os, nodes, indent, {}, expr_of, tmp, "t");
}

void emit_pointwise_nodes(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& ind,
                          const std::unordered_set<const Value*>& scalars,
                          std::unordered_map<const Value*, std::string>& expr_of, int& tmp, const std::string& prefix) {
  for (Node* n : nodes) {
    DType c = op_compute_dtype(*n);
    std::vector<std::string> args;
    for (size_t i = 0; i < n->operands.size(); ++i) {
      const Operand& o = n->operands[i];
      // where's condition takes no part in promotion: it is a truth value
      DType want = promotes_operand(n->op, i) ? c : DType::boolean;
      if (!o.is_value()) {
        args.push_back(cuda_literal(o.literal, want));
        continue;
      }
      const std::string& e = expr_of.at(o.value);
      DType have = compute_dtype(o.value->type.dtype);
      if (scalars.count(o.value) != 0) have = DType::f64;
      args.push_back(have == want ? e : "static_cast<" + cuda_storage_type(want) + ">(" + e + ")");
    }
    DType r = n->result()->type.dtype;
    std::string e = op_expr(*n, args, c);
    if (compute_dtype(r) != c) e = "static_cast<" + cuda_compute_type(r) + ">(" + e + ")";
    if (r == DType::f16) e = "ff_round_f16(" + e + ")";
    if (r == DType::bf16) e = "ff_round_bf16(" + e + ")";
    std::string t = prefix + std::to_string(tmp++);
    os << ind << "const " << cuda_compute_type(r) << " " << t << " = " << e << ";  // " << op_name(n->op) << "\n";
    expr_of[n->result()] = t;
  }
}

Shape broadcast_strides(const TensorType& t, const Shape& shape) {
  Shape s(shape.size(), 0);
  const size_t off = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i)
    if (t.shape[i] != 1) s[off + i] = t.strides[i];
  return s;
}

std::string fused_kernel_name(const std::string& prefix, const std::vector<Node*>& nodes, int id) {
  std::string name = prefix;
  std::set<std::string> seen;
  int listed = 0;
  for (const Node* n : nodes) {
    const std::string op(op_name(n->op));
    if (!seen.insert(op).second) continue;
    if (++listed > 4) {
      name += "_etc";
      break;
    }
    name += "_" + op;
  }
  return name + "_" + std::to_string(id);
}

int64_t max_offset(const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off += (shape[d] - 1) * std::llabs(strides[d]);
  return off;
}

KernelReach kernel_reach(int64_t elements, const std::vector<const Value*>& values, const std::vector<Node*>& nodes) {
  const auto is_half = [](DType t) { return t == DType::f16 || t == DType::bf16; };
  KernelReach r{elements, false};
  for (const Value* v : values) {
    r.offset = std::max(r.offset, max_offset(v->type.shape, v->type.strides));
    r.half |= is_half(v->type.dtype);
  }
  for (const Node* n : nodes) r.half |= is_half(n->result()->type.dtype);
  return r;
}

std::string dims_text(const Shape& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

std::string kernel_parameters(const std::vector<KernelParam>& outputs, const std::vector<KernelParam>& inputs,
                              size_t scalars) {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : ", ") + p; };
  for (const KernelParam& p : outputs) add(cuda_storage_type(p.dtype) + "* __restrict__ " + p.name);
  for (const KernelParam& p : inputs) add("const " + cuda_storage_type(p.dtype) + "* __restrict__ " + p.name);
  for (size_t i = 0; i < scalars; ++i) add("double s" + std::to_string(i));
  return out;
}

}  // namespace ff::codegen
