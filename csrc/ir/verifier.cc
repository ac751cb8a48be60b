// Structural and type checks of a graph. Errors name the node (as printed) and
// what is wrong, so a bad capture or a buggy pass is caught where it happens.
#include <unordered_set>

#include "ir/graph.h"

namespace ff {

namespace {
std::string type_str(const TensorType& t) {
  std::string s(dtype_name(t.dtype));
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  s += "]{";
  for (size_t i = 0; i < t.strides.size(); ++i) s += (i ? "," : "") + std::to_string(t.strides[i]);
  return s + "}";
}
}  // namespace

void verify(const Graph& g) {
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  auto define = [&](const Value* v) {
    if (!names.insert(v->name).second) throw IRError("value '%" + v->name + "' is defined twice");
    defined.insert(v);
  };
  for (const Value* in : g.inputs()) {
    define(in);
    if (in->type.strides.size() != in->type.shape.size())
      throw IRError("input '%" + in->name + "': stride count differs from the rank");
    if (in->input_kind == InputKind::Scalar && !in->type.shape.empty())
      throw IRError("scalar input '%" + in->name + "' must be 0-d");
  }
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    auto where = [&] { return "in '" + print_node(n) + "': "; };
    const OpInfo& info = op_info(n.op);
    if (info.num_operands >= 0 && static_cast<int>(n.operands.size()) != info.num_operands &&
        !(n.op == Op::Convolution))
      throw IRError(where() + std::string(info.name) + " takes " + std::to_string(info.num_operands) +
                    " operands, got " + std::to_string(n.operands.size()));
    if (n.op == Op::Convolution && (n.operands.size() < 2 || n.operands.size() > 3))
      throw IRError(where() + "convolution takes 2 or 3 operands");
    for (auto& o : n.operands)
      if (o.is_value() && !defined.count(o.value))
        throw IRError(where() + "operand '%" + o.value->name + "' is used before it is defined");
    if (n.op == Op::Opaque && !n.has_attr("target")) throw IRError(where() + "opaque node without a 'target'");
    std::vector<TensorType> expected;
    try {
      expected = infer_result_types(n);
    } catch (const IRError& e) {
      throw IRError(where() + e.what());
    }
    if (expected.size() != n.results.size())
      throw IRError(where() + "expected " + std::to_string(expected.size()) + " results");
    for (size_t i = 0; i < expected.size(); ++i) {
      const TensorType& got = n.results[i]->type;
      if (got.shape != expected[i].shape || got.dtype != expected[i].dtype)
        throw IRError(where() + "result type " + type_str(got) + " does not match the op's rule " +
                      type_str(expected[i]));
      if (op_kind(n.op) == OpKind::Layout && !same_strides(got.shape, got.strides, expected[i].strides))
        throw IRError(where() + "result strides " + type_str(got) + " differ from the view's " + type_str(expected[i]));
      if (got.strides.size() != got.shape.size()) throw IRError(where() + "stride count differs from the rank");
    }
    for (const Value* r : n.results) define(r);
  }
  for (const Value* o : g.outputs())
    if (!defined.count(o)) throw IRError("output '%" + o->name + "' is not defined in the graph");
  for (auto& m : g.mutations()) {
    if (!m.buffer->is_input() || m.buffer->input_kind != InputKind::Buffer)
      throw IRError("mutate target '%" + m.buffer->name + "' is not a buffer input");
    if (!defined.count(m.value)) throw IRError("mutate value '%" + m.value->name + "' is not defined");
    if (m.value->type.shape != m.buffer->type.shape || m.value->type.dtype != m.buffer->type.dtype)
      throw IRError("mutate '%" + m.buffer->name + "': new value type " + type_str(m.value->type) +
                    " differs from the buffer's " + type_str(m.buffer->type));
  }
}

}  // namespace ff
