// Text form of the IR. The grammar is documented in docs/IR.md; parser.cc reads
// exactly what this writes. Values produced by nodes whose names are plain
// numbers are renumbered in definition order, so printed graphs are stable
// across passes; named values (graph inputs, named results) keep their names.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ir/graph.h"

namespace ff {

namespace {

bool is_number_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  // Shortest representation that reads back to the same double.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string format_ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string format_attr(const AttrValue& a) {
  struct {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return format_double(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return quote_string(v); }
    std::string operator()(const std::vector<int64_t>& v) const { return format_ints(v); }
  } visitor;
  return std::visit(visitor, a);
}

}  // namespace

std::string format_type(const TensorType& t) {
  std::string s(dtype_name(t.dtype));
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  s += "]";
  if (!t.is_contiguous()) {
    s += "{";
    for (size_t i = 0; i < t.strides.size(); ++i) s += (i ? "," : "") + std::to_string(t.strides[i]);
    s += "}";
  }
  return s;
}

namespace {

class Printer {
 public:
  explicit Printer(const Graph* g) {
    if (!g) return;
    // Numbers already taken by values that keep their names (a graph input
    // called %0, as in a kernel's subgraph) are skipped.
    std::unordered_set<std::string> kept;
    for (Value* v : g->inputs()) kept.insert(v->name);
    for (auto& n : g->nodes())
      for (Value* r : n->results)
        if (!is_number_name(r->name)) kept.insert(r->name);
    int next = 0;
    for (auto& n : g->nodes())
      for (Value* r : n->results) {
        if (!is_number_name(r->name)) continue;
        while (kept.count(std::to_string(next))) next++;
        names_[r] = std::to_string(next++);
      }
  }

  std::string name(const Value* v) const {
    auto it = names_.find(v);
    return "%" + (it == names_.end() ? v->name : it->second);
  }

  std::string node(const Node& n) const {
    std::string s;
    for (size_t i = 0; i < n.results.size(); ++i) s += (i ? ", " : "") + name(n.results[i]);
    s += " = ";
    s += op_name(n.op);
    s += "(";
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Operand& o = n.operands[i];
      s += (i ? ", " : "") + (o.is_value() ? name(o.value) : format_scalar(o.literal));
    }
    s += ")";
    if (!n.attrs.empty()) {
      s += " {";
      bool first = true;
      for (auto& [k, v] : n.attrs) {
        s += (first ? "" : ", ") + k + "=" + format_attr(v);
        first = false;
      }
      s += "}";
    }
    s += " : ";
    for (size_t i = 0; i < n.results.size(); ++i) s += (i ? ", " : "") + format_type(n.results[i]->type);
    return s;
  }

 private:
  std::unordered_map<const Value*, std::string> names_;
};

}  // namespace

std::string quote_string(const std::string& s, char quote) {
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + quote;
}

std::string format_scalar(const Scalar& s) {
  switch (s.kind) {
    case Scalar::Kind::Float:
      return format_double(s.f);
    case Scalar::Kind::Int:
      return std::to_string(s.i);
    case Scalar::Kind::Bool:
      return s.i ? "true" : "false";
  }
  return "?";
}

std::string print_node(const Node& n) { return Printer(nullptr).node(n); }

std::string print(const Graph& g, bool keep_names) {
  Printer p(keep_names ? nullptr : &g);
  std::ostringstream os;
  os << "graph @" << g.name << "(";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    os << (i ? ", " : "") << p.name(v) << ": " << format_type(v->type);
    std::string_view kind = input_kind_name(v->input_kind);
    if (!kind.empty()) os << " " << kind;
  }
  os << ") {\n";
  for (auto& n : g.nodes()) os << "  " << p.node(*n) << "\n";
  os << "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << (i ? ", " : " ") << p.name(g.outputs()[i]);
  os << "\n";
  for (auto& m : g.mutations()) os << "  mutate " << p.name(m.buffer) << " = " << p.name(m.value) << "\n";
  os << "}\n";
  return os.str();
}

}  // namespace ff
