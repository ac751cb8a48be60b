#pragma once
// The fuseforge IR: a typed SSA graph with static shapes.
//
// A Graph owns its Values and Nodes. Graph inputs are Values with no producer,
// tagged with what they are (user input, parameter, buffer, constant, scalar).
// Nodes are kept in a topological order (`nodes()`); each Node has operands
// (a Value or a scalar literal), attributes and one or more result Values.
// Buffer mutations (train-mode BatchNorm running stats) are (buffer input,
// new value) pairs that the runtime writes back after the outputs.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "ir/dtype.h"
#include "ir/op.h"

namespace ff {

using Shape = std::vector<int64_t>;

// Thrown for malformed IR (parse and verify errors, unsupported constructs);
// the message names what was wrong.
struct IRError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sizes, extents and strides stay within int64: these throw IRError when a
// product or sum overflows (no such tensor can exist, so only malformed IR,
// e.g. a fuzzed shape, gets there).
int64_t checked_mul(int64_t a, int64_t b);
int64_t checked_add(int64_t a, int64_t b);
int64_t numel(const Shape& shape);
// Row-major strides; size-0 dims count as 1, so they too must not overflow.
Shape contiguous_strides(const Shape& shape);
// Whether two stride lists address a tensor of `shape` alike: a dim of
// extent 1 is never stepped along, so its stride is any (torch keeps an
// input's there where a rule writes the contiguous one).
bool same_strides(const Shape& shape, const Shape& a, const Shape& b);

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  Shape strides;  // always filled; equal to contiguous_strides(shape) unless a view says otherwise
  bool is_contiguous() const { return strides == contiguous_strides(shape); }
  double bytes() const;  // its elements' bytes (a pass over it reads or writes this many)
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape && strides == o.strides; }
  static TensorType contiguous(DType dtype, Shape shape);
};

// A literal operand or attribute number. Float, integer and bool literals print
// differently (2.0, 2, true) and keep PyTorch's promotion category.
struct Scalar {
  enum class Kind : uint8_t { Float, Int, Bool } kind = Kind::Float;
  double f = 0.0;  // Float
  int64_t i = 0;   // Int and Bool
  static Scalar of_float(double v) { return {Kind::Float, v, 0}; }
  static Scalar of_int(int64_t v) { return {Kind::Int, 0.0, v}; }
  static Scalar of_bool(bool v) { return {Kind::Bool, 0.0, v ? 1 : 0}; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(i); }
  bool operator==(const Scalar& o) const { return kind == o.kind && f == o.f && i == o.i; }
};

enum class InputKind : uint8_t { User, Param, Buffer, Const, Scalar };
std::string_view input_kind_name(InputKind k);  // "" for User

class Node;

class Value {
 public:
  std::string name;  // printed as %name; graph inputs keep state_dict names
  TensorType type;
  Node* producer = nullptr;                // null for graph inputs
  int result_index = 0;                    // which result of `producer`
  InputKind input_kind = InputKind::User;  // meaningful for graph inputs only
  bool is_input() const { return producer == nullptr; }
};

struct Operand {
  Value* value = nullptr;  // null: the operand is `literal`
  Scalar literal;
  bool is_value() const { return value != nullptr; }
  static Operand of(Value* v) { return {v, {}}; }
  static Operand of(Scalar s) { return {nullptr, s}; }
};

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
using Attrs = std::map<std::string, AttrValue>;  // sorted: prints deterministically

class Node {
 public:
  Op op;
  std::vector<Operand> operands;
  Attrs attrs;
  std::vector<Value*> results;

  Value* result(size_t i = 0) const { return results.at(i); }
  Value* input(size_t i) const { return operands.at(i).value; }  // null for a literal
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key) const;
  double attr_float(const std::string& key) const;  // accepts int attrs too
  bool attr_bool(const std::string& key) const;
  const std::string& attr_string(const std::string& key) const;
  const std::vector<int64_t>& attr_ints(const std::string& key) const;
  int64_t attr_int_or(const std::string& key, int64_t dflt) const;
  bool attr_bool_or(const std::string& key, bool dflt) const;
};

class Graph {
 public:
  std::string name = "main";

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  std::unique_ptr<Graph> clone() const;

  // ---- construction
  Value* add_input(std::string name, TensorType type, InputKind kind = InputKind::User);
  // Appends a node; results get fresh names unless `result_names` is given.
  Node* add_node(Op op, std::vector<Operand> operands, std::vector<TensorType> result_types, Attrs attrs = {},
                 std::vector<std::string> result_names = {});
  // Inserts a node just before `before` (which must be in the graph).
  Node* insert_before(Node* before, Op op, std::vector<Operand> operands, std::vector<TensorType> result_types,
                      Attrs attrs = {});
  void add_output(Value* v) { outputs_.push_back(v); }
  void add_mutation(Value* buffer, Value* new_value) { mutations_.push_back({buffer, new_value}); }

  // ---- access
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  struct Mutation {
    Value* buffer;
    Value* value;
  };
  const std::vector<Mutation>& mutations() const { return mutations_; }
  Value* find_value(const std::string& name) const;  // null if absent
  // Nodes that read `v`, in graph order (a node appears once even if it reads v twice).
  std::vector<Node*> users(const Value* v) const;
  bool is_graph_output(const Value* v) const;  // an output or a mutation's new value

  // ---- mutation
  // Points every use of `from` (node operands, outputs, mutations) at `to`.
  void replace_all_uses(Value* from, Value* to);
  // The same for every key of `to`, in one walk.
  void replace_all_uses(const std::unordered_map<const Value*, Value*>& to);
  // Removes nodes for which `dead` returns true. Their results must be unused.
  template <class Pred>
  void erase_nodes_if(Pred dead) {
    ++walks_;
    std::vector<std::unique_ptr<Node>> kept;
    for (auto& n : nodes_)
      if (!dead(n.get())) kept.push_back(std::move(n));
    nodes_ = std::move(kept);
  }
  // Removes exactly `nodes` (a rewrite's replaced nodes). Their results must be unused.
  template <class NodePtr>
  void erase_nodes(const std::vector<NodePtr>& nodes) {
    const std::unordered_set<const Node*> dead(nodes.begin(), nodes.end());
    erase_nodes_if([&](const Node* n) { return dead.count(n) != 0; });
  }
  // Reorders nodes; `order` must be a permutation of nodes().
  void set_node_order(const std::vector<Node*>& order);
  std::string fresh_name();
  // How many times users(), replace_all_uses(), insert_before(),
  // erase_nodes*() and set_node_order() walked the nodes: each walk costs
  // the graph's size, so a pass that stays linear does a bounded number,
  // whatever the size (tests check this).
  int64_t walks() const { return walks_; }

 private:
  std::vector<std::unique_ptr<Value>> values_;
  // Every value by name (names are unique and never change): parsing and
  // fresh names look names up once per value, not by scanning all of them.
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> outputs_;
  std::vector<Mutation> mutations_;
  int64_t next_id_ = 0;
  mutable int64_t walks_ = 0;
  Value* new_value(std::string name, TensorType type);
};

// Every value's readers as Graph::users gives them, found in one walk: for
// an analysis that asks for many values' users without changing the graph in
// between (Graph::users walks the whole graph for each value).
class Users {
 public:
  explicit Users(const Graph& g);
  const std::vector<Node*>& of(const Value* v) const;

 private:
  std::unordered_map<const Value*, std::vector<Node*>> users_;
};

// ---- text form (printer.cc / parser.cc)
// Values produced by nodes whose names are plain numbers are renumbered in
// definition order (stable across passes), unless `keep_names`.
std::string print(const Graph& g, bool keep_names = false);
std::string print_node(const Node& n);         // one line, without indentation, names as they are
std::string format_type(const TensorType& t);  // "f32[4,8]", strides in braces when not contiguous
std::string format_scalar(const Scalar& s);
// `s` between `quote`s, with the quote, backslash and newline escaped (IR
// attribute strings; with '\'' also a Python string literal).
std::string quote_string(const std::string& s, char quote = '"');
std::unique_ptr<Graph> parse(const std::string& text);  // throws IRError with line:col
// One node line as print_node writes it, appended to `g`, whose values its
// operands name; throws IRError.
Node* parse_node(Graph& g, const std::string& line);
TensorType parse_type(const std::string& text);  // throws IRError

// ---- checks (verifier.cc / shape_rules.cc)
// Throws IRError naming the node and what is wrong: operand counts, use before
// definition, missing attributes, result types that contradict the op's shape rule.
void verify(const Graph& g);
// Result type of a non-opaque node from its operands and attributes; for ops whose
// result shape is not derivable (view, expand, full, cast) the declared type is
// checked for consistency instead. Throws IRError when the operands do not fit.
std::vector<TensorType> infer_result_types(const Node& n);
// Strides of `shape` viewed from a tensor of (old_shape, old_strides) (ATen's
// computeStride), or nullopt when the layout allows no view (view then copies).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape);
// Broadcast shape of two shapes (right-aligned, numpy rules); throws IRError.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Whether `from` broadcasts to exactly `to` (right-aligned, size-1 dims stretch).
bool broadcasts_to(const Shape& from, const Shape& to);
// Normalizes a possibly negative dim for a tensor of rank `rank`; throws IRError.
int64_t normalize_dim(int64_t dim, int64_t rank);
// A `slice` node's bounds on an input of `shape`, clamped as PyTorch does.
struct SliceBounds {
  int64_t dim, start, step, size;  // size: elements in the result along dim
};
SliceBounds slice_bounds(const Node& slice, const Shape& shape);

}  // namespace ff
