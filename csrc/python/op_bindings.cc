// Bindings of the op registry: what Python asks about ops and dtypes (names,
// kinds, arities, result-dtype rules, ATen mappings, the dtype table, IR float
// text) and the torch expression of a node run as a library call.
#include "python/op_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "codegen/torch/library_call.h"
#include "ir/graph.h"
#include "ir/type_rules.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ff::python {

namespace {

Op op_named(const std::string& name) {
  if (auto op = parse_op(name)) return *op;
  throw IRError("unknown IR op '" + name + "'");
}

DType dtype_named(const std::string& name) {
  if (auto d = parse_dtype(name)) return *d;
  throw IRError("unknown IR dtype '" + name + "'");
}

std::vector<std::string> aten_overloads(const OpInfo& info) {
  std::vector<std::string> out;
  std::string_view s = info.aten;
  while (!s.empty()) {
    size_t end = s.find(' ');
    if (end != 0) out.emplace_back(s.substr(0, end));
    if (end == std::string_view::npos) break;
    s.remove_prefix(end + 1);
  }
  return out;
}

// A promotion operand from Python: (dtype name, rank) for a tensor, "float",
// "int" or "bool" for a Python number, None for one left out.
std::optional<PromotionOperand> promotion_operand(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  if (nb::isinstance<nb::str>(h)) {
    std::string kind = nb::cast<std::string>(h);
    if (kind == "float") return PromotionOperand::number_of(DType::f64);
    if (kind == "int") return PromotionOperand::number_of(DType::i64);
    if (kind == "bool") return PromotionOperand::number_of(DType::boolean);
    throw IRError("a number operand is 'float', 'int' or 'bool', not '" + kind + "'");
  }
  auto [name, rank] = nb::cast<std::pair<std::string, int64_t>>(h);
  using Tier = PromotionOperand::Tier;
  return PromotionOperand{rank == 0 ? Tier::ZeroDim : Tier::Dimensioned, dtype_named(name)};
}

PromotionOperands promotion_operands(const nb::list& operands) {
  PromotionOperands out;
  for (nb::handle h : operands) out.push_back(promotion_operand(h));
  return out;
}

std::optional<std::string> name_of(std::optional<DType> d) {
  if (!d) return std::nullopt;
  return std::string(dtype_name(*d));
}

// The torch expression of node `index` (negative: from the end) of a graph.
std::string graph_node_torch_expr(const std::string& text, int64_t index,
                                  const std::vector<std::string>& operand_texts) {
  auto g = parse(text);
  verify(*g);
  int64_t count = static_cast<int64_t>(g->nodes().size());
  int64_t i = index < 0 ? index + count : index;
  if (i < 0 || i >= count)
    throw IRError("node " + std::to_string(index) + " of a graph of " + std::to_string(count) + " nodes");
  return codegen::torch_expr(*g->nodes()[i], operand_texts);
}

}  // namespace

void bind_op_registry(nb::module_& m) {
  nb::class_<OpInfo>(m, "OpInfo", "An IR op's facts, as ir/ops.def declares them.")
      .def_prop_ro("name", [](const OpInfo& i) { return std::string(i.name); })
      .def_prop_ro("kind", [](const OpInfo& i) { return std::string(op_kind_name(i.kind)); })
      .def_ro("num_operands", &OpInfo::num_operands, "-1: variadic")
      .def_prop_ro(
          "result_dtype", [](const OpInfo& i) { return std::string(result_dtype_name(i.result_dtype)); },
          "the result-dtype rule: promote, promote_tail, float, compare, logical, index, first or declared")
      .def_prop_ro("aten", &aten_overloads, "the ATen overloads ('mul.Tensor') it maps from 1:1, operands in order")
      .def(
          "promotes_operand", [](const OpInfo& i, size_t k) { return promotes_operand(i.op, k); }, "i"_a,
          "whether operand i takes part in type promotion (not where's condition)")
      .def("__repr__", [](const OpInfo& i) { return "<OpInfo " + std::string(i.name) + ">"; });
  m.def(
      "op_names",
      [] {
        std::vector<std::string> names;
        for (size_t i = 0; i < kNumOps; ++i) names.emplace_back(op_name(static_cast<Op>(i)));
        return names;
      },
      "Every IR op's name, in ops.def order.");
  m.def(
      "op_info", [](const std::string& name) { return op_info(op_named(name)); }, "name"_a,
      "The facts of IR op `name` (ValueError for an unknown one).");

  nb::class_<DTypeInfo>(m, "DTypeInfo", "A row of the dtype table (ir/dtype.h).")
      .def_prop_ro("name", [](const DTypeInfo& d) { return std::string(d.name); })
      .def_ro("size", &DTypeInfo::size)
      .def_prop_ro(
          "torch", [](const DTypeInfo& d) { return std::string(d.torch); }, "torch attribute: 'float32'")
      .def_prop_ro("aten", [](const DTypeInfo& d) { return std::string(d.aten); }, "C++ constant: 'at::kFloat'");
  m.def(
      "dtype_table",
      [] {
        std::vector<DTypeInfo> rows(dtype_table(), dtype_table() + kNumDTypes);
        return rows;
      },
      "The IR's dtypes, one DTypeInfo each.");

  m.def(
      "promote_types",
      [](const nb::list& operands) {
        std::vector<PromotionOperand> in;
        for (auto& o : promotion_operands(operands))
          if (o) in.push_back(*o);
        return name_of(promote_types(in));
      },
      "operands"_a,
      "PyTorch's result_type: operands are (dtype, rank) for a tensor or 'float'/'int'/'bool' for a "
      "Python number (None: left out); None when nothing takes part.");
  m.def(
      "common_dtype",
      [](const std::string& op, const nb::list& operands) {
        return name_of(common_dtype(op_named(op), promotion_operands(operands)));
      },
      "op"_a, "operands"_a, "result_type of the operands `op` promotes (where: not its condition).");
  m.def(
      "result_dtype",
      [](const std::string& op, const nb::list& operands) {
        return name_of(result_dtype(op_named(op), promotion_operands(operands)));
      },
      "op"_a, "operands"_a, "The result dtype by `op`'s rule; None where the node declares it.");

  m.def(
      "format_float", [](double v) { return format_scalar(Scalar::of_float(v)); }, "v"_a,
      "A float as the IR prints it: the shortest text that reads back to the same double.");
  m.def("torch_expr", &graph_node_torch_expr, "text"_a, "node"_a, "operand_texts"_a,
        "Python source of the torch expression computing node `node` (negative: from the end) of IR graph "
        "`text` as a library call, over `operand_texts` (`dev` names the device). A plan's steps have "
        "Step.torch_expr.");
}

}  // namespace ff::python
