#include "fusion/subgraph.h"

#include <unordered_map>

namespace ff::fusion {

std::unique_ptr<Graph> extract_subgraph(const Group& group, const std::string& name) {
  auto g = std::make_unique<Graph>();
  g->name = name;
  std::unordered_map<const Value*, Value*> map;
  for (Value* in : group.inputs) {
    InputKind kind = in->is_input() ? in->input_kind : InputKind::User;
    map[in] = g->add_input(in->name, in->type, kind);
  }
  for (Node* n : group.nodes) {
    std::vector<Operand> ops;
    for (auto& o : n->operands) ops.push_back(o.is_value() ? Operand::of(map.at(o.value)) : o);
    Node* c = g->add_node(n->op, std::move(ops), {n->result()->type}, n->attrs, {n->result()->name});
    map[n->result()] = c->result();
  }
  for (Value* o : group.outputs) g->add_output(map.at(o));
  return g;
}

}  // namespace ff::fusion
