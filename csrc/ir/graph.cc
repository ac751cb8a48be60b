#include "ir/graph.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ff {

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw IRError(std::to_string(a) + " * " + std::to_string(b) + " overflows int64");
  return r;
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw IRError(std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  return r;
}

double TensorType::bytes() const { return static_cast<double>(numel(shape)) * dtype_size(dtype); }

int64_t numel(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d);
  return n;
}

bool same_strides(const Shape& shape, const Shape& a, const Shape& b) {
  if (a.size() != shape.size() || b.size() != shape.size()) return a == b;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && a[d] != b[d]) return false;
  return true;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    if (i > 0) acc = checked_mul(acc, std::max<int64_t>(shape[i], 1));
  }
  return s;
}

TensorType TensorType::contiguous(DType dtype, Shape shape) {
  TensorType t;
  t.dtype = dtype;
  t.strides = contiguous_strides(shape);
  t.shape = std::move(shape);
  return t;
}

std::string_view input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::User:
      return "";
    case InputKind::Param:
      return "param";
    case InputKind::Buffer:
      return "buffer";
    case InputKind::Const:
      return "const";
    case InputKind::Scalar:
      return "scalar";
  }
  return "";
}

// ---- Node attribute access

namespace {
template <class T>
const T& get_attr(const Node& n, const std::string& key, const char* what) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) throw IRError(std::string(op_name(n.op)) + ": missing attribute '" + key + "'");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw IRError(std::string(op_name(n.op)) + ": attribute '" + key + "' must be " + what);
}
}  // namespace

int64_t Node::attr_int(const std::string& key) const { return get_attr<int64_t>(*this, key, "an integer"); }
bool Node::attr_bool(const std::string& key) const { return get_attr<bool>(*this, key, "a bool"); }
const std::string& Node::attr_string(const std::string& key) const {
  return get_attr<std::string>(*this, key, "a string");
}
const std::vector<int64_t>& Node::attr_ints(const std::string& key) const {
  return get_attr<std::vector<int64_t>>(*this, key, "an integer list");
}
double Node::attr_float(const std::string& key) const {
  auto it = attrs.find(key);
  if (it != attrs.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return get_attr<double>(*this, key, "a number");
}
int64_t Node::attr_int_or(const std::string& key, int64_t dflt) const { return has_attr(key) ? attr_int(key) : dflt; }
bool Node::attr_bool_or(const std::string& key, bool dflt) const { return has_attr(key) ? attr_bool(key) : dflt; }

// ---- Graph

Value* Graph::new_value(std::string name, TensorType type) {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->name = std::move(name);
  v->type = std::move(type);
  by_name_.emplace(v->name, v);
  return v;
}

std::string Graph::fresh_name() {
  for (;;) {
    std::string n = std::to_string(next_id_++);
    if (!find_value(n)) return n;
  }
}

Value* Graph::add_input(std::string name, TensorType type, InputKind kind) {
  if (find_value(name)) throw IRError("duplicate value name '%" + name + "'");
  Value* v = new_value(std::move(name), std::move(type));
  v->input_kind = kind;
  inputs_.push_back(v);
  return v;
}

namespace {
std::unique_ptr<Node> make_node(Op op, std::vector<Operand> operands, Attrs attrs) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->operands = std::move(operands);
  n->attrs = std::move(attrs);
  return n;
}
}  // namespace

Node* Graph::add_node(Op op, std::vector<Operand> operands, std::vector<TensorType> result_types, Attrs attrs,
                      std::vector<std::string> result_names) {
  auto n = make_node(op, std::move(operands), std::move(attrs));
  for (size_t i = 0; i < result_types.size(); ++i) {
    std::string nm = i < result_names.size() ? result_names[i] : fresh_name();
    if (i < result_names.size() && find_value(nm)) throw IRError("duplicate value name '%" + nm + "'");
    Value* v = new_value(std::move(nm), std::move(result_types[i]));
    v->producer = n.get();
    v->result_index = static_cast<int>(i);
    n->results.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Node* Graph::insert_before(Node* before, Op op, std::vector<Operand> operands, std::vector<TensorType> result_types,
                           Attrs attrs) {
  Node* n = add_node(op, std::move(operands), std::move(result_types), std::move(attrs));
  auto last = std::move(nodes_.back());
  nodes_.pop_back();
  ++walks_;
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == before; });
  if (it == nodes_.end()) throw IRError("insert_before: anchor node is not in the graph");
  nodes_.insert(it, std::move(last));
  return n;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<Node*> Graph::users(const Value* v) const {
  ++walks_;
  std::vector<Node*> out;
  for (auto& n : nodes_)
    for (auto& o : n->operands)
      if (o.value == v) {
        out.push_back(n.get());
        break;
      }
  return out;
}

Users::Users(const Graph& g) {
  for (auto& n : g.nodes())
    for (auto& o : n->operands) {
      if (!o.is_value()) continue;
      auto& readers = users_[o.value];
      if (readers.empty() || readers.back() != n.get()) readers.push_back(n.get());
    }
}

const std::vector<Node*>& Users::of(const Value* v) const {
  static const std::vector<Node*> none;
  auto it = users_.find(v);
  return it == users_.end() ? none : it->second;
}

bool Graph::is_graph_output(const Value* v) const {
  if (std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end()) return true;
  for (auto& m : mutations_)
    if (m.value == v) return true;
  return false;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  ++walks_;
  for (auto& n : nodes_)
    for (auto& o : n->operands)
      if (o.value == from) o.value = to;
  for (auto& o : outputs_)
    if (o == from) o = to;
  for (auto& m : mutations_)
    if (m.value == from) m.value = to;
}

void Graph::replace_all_uses(const std::unordered_map<const Value*, Value*>& to) {
  if (to.empty()) return;
  ++walks_;
  auto moved = [&](Value*& v) {
    if (auto it = to.find(v); it != to.end()) v = it->second;
  };
  for (auto& n : nodes_)
    for (auto& o : n->operands)
      if (o.is_value()) moved(o.value);
  for (auto& o : outputs_) moved(o);
  for (auto& m : mutations_) moved(m.value);
}

void Graph::set_node_order(const std::vector<Node*>& order) {
  if (order.size() != nodes_.size()) throw IRError("set_node_order: not a permutation of the nodes");
  ++walks_;
  std::unordered_map<Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) {
    auto it = owned.find(n);
    if (it == owned.end() || !it->second) throw IRError("set_node_order: not a permutation of the nodes");
    nodes_.push_back(std::move(it->second));
  }
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  g->next_id_ = next_id_;
  std::unordered_map<const Value*, Value*> map;
  for (Value* in : inputs_) map[in] = g->add_input(in->name, in->type, in->input_kind);
  for (auto& n : nodes_) {
    std::vector<Operand> ops;
    for (auto& o : n->operands) ops.push_back(o.is_value() ? Operand::of(map.at(o.value)) : o);
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (Value* r : n->results) {
      types.push_back(r->type);
      names.push_back(r->name);
    }
    Node* c = g->add_node(n->op, std::move(ops), std::move(types), n->attrs, std::move(names));
    for (size_t i = 0; i < n->results.size(); ++i) map[n->results[i]] = c->results[i];
  }
  for (Value* o : outputs_) g->add_output(map.at(o));
  for (auto& m : mutations_) g->add_mutation(map.at(m.buffer), map.at(m.value));
  return g;
}

}  // namespace ff
