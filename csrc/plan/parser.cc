// Reads the plan text that printer.cc writes (format there). Line-oriented:
// each buffer, kernel header, step and trailer is one line; a kernel's graph
// spans the lines up to its closing brace. Call and view lines are IR node
// lines (parse_node) over a graph whose inputs are the buffers that no call
// or view defines (a library form's call included). A kernel's library form
// is read after every kernel's header: it launches a kernel listed later.
// Kernel sources and per-kernel node steps are not in the text: a parsed plan
// prints and compares, it does not run.
#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "plan/plan.h"

namespace ff::plan {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(' ') - b + 1);
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

class Parser {
 public:
  explicit Parser(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines_.push_back(line);
  }

  Plan plan() {
    std::string head = next();
    if (!starts_with(head, "plan @") || head.back() != '{' || head.size() < 9) fail("expected 'plan @NAME {'");
    p_.name = trim(head.substr(6, head.size() - 7));
    if (next() != "buffers:") fail("expected 'buffers:'");
    while (at_item() && !starts_with(peek(), "kernel @") && peek() != "prepare:") buffer(next());
    while (at_item() && starts_with(peek(), "kernel @")) kernel(next());
    const std::string prepare_head = next();
    if (prepare_head != "prepare:") {
      const size_t arrow = prepare_head.find(") -> (");
      if (!starts_with(prepare_head, "prepare (") || arrow == std::string::npos || prepare_head.size() < 2 ||
          prepare_head.compare(prepare_head.size() - 2, 2, "):") != 0)
        fail("expected 'prepare:' or 'prepare (READS) -> (KEEPS):'");
      p_.prepare_reads = refs(prepare_head.substr(9, arrow - 9));
      p_.prepare_keeps = refs(prepare_head.substr(arrow + 6, prepare_head.size() - arrow - 8));
    }
    std::vector<std::string> prepare, run;
    while (at_item() && peek() != "run:") prepare.push_back(next());
    if (next() != "run:") fail("expected 'run:'");
    while (at_item() && !starts_with(peek(), "return")) run.push_back(next());
    std::vector<std::string> library_lines;
    for (const auto& [k, line] : library_) library_lines.push_back(line);
    graph_inputs({&library_lines, &prepare, &run});
    for (const auto& [k, line] : library_) p_.kernels[k].library_steps.push_back(step(line));
    p_.prepare = steps(prepare);
    p_.run = steps(run);
    const std::string ret = next();
    if (!starts_with(ret, "return")) fail("expected 'return'");
    if (ret.size() > 6) p_.outputs = refs(ret.substr(6));
    while (at_item() && starts_with(peek(), "mutate ")) {
      const std::string m = next().substr(7);
      const size_t eq = m.find(" = ");
      if (eq == std::string::npos) fail("expected 'mutate %BUFFER = %VALUE'");
      p_.mutations.push_back({buffer_ref(m.substr(0, eq)), buffer_ref(m.substr(eq + 3))});
    }
    if (next() != "}") fail("expected '}' closing the plan");
    while (line_ < lines_.size())
      if (!trim(lines_[line_++]).empty()) fail("unexpected text after the plan");
    for (const Buffer& b : p_.buffers)
      if (b.role == Buffer::Role::Input || b.role == Buffer::Role::Param || b.role == Buffer::Role::State ||
          b.role == Buffer::Role::Const || b.role == Buffer::Role::Scalar)
        p_.inputs.push_back(static_cast<int>(&b - p_.buffers.data()));
    return std::move(p_);
  }

 private:
  std::vector<std::string> lines_;
  size_t line_ = 0;
  Plan p_;
  std::vector<std::pair<size_t, std::string>> library_;  // (kernel, step line) of the library forms

  [[noreturn]] void fail(const std::string& msg) const {
    throw IRError("plan line " + std::to_string(line_) + ": " + msg);
  }
  bool at_item() const { return line_ < lines_.size() && trim(lines_[line_]) != "}"; }
  const std::string& raw_peek() const {
    if (line_ >= lines_.size()) fail("unexpected end of the plan");
    return lines_[line_];
  }
  std::string peek() const { return trim(raw_peek()); }
  std::string next() {
    std::string s = peek();
    line_++;
    return s;
  }

  int buffer_ref(const std::string& text) const {
    const std::string t = trim(text);
    if (t.size() < 2 || t[0] != '%') fail("expected a buffer name, got '" + t + "'");
    const int b = p_.find(t.substr(1));
    if (b < 0) fail("unknown buffer '" + t + "'");
    return b;
  }
  std::vector<int> refs(const std::string& text) const {
    std::vector<int> out;
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, ',');) out.push_back(buffer_ref(item));
    return out;
  }

  void buffer(const std::string& line) {
    const size_t colon = line.find(": ");
    if (colon == std::string::npos || line[0] != '%') fail("expected '%NAME: TYPE ROLE'");
    Buffer b;
    b.name = line.substr(1, colon - 1);
    if (p_.find(b.name) >= 0) fail("buffer '%" + b.name + "' declared twice");
    std::istringstream rest(line.substr(colon + 2));
    std::string type, role, alias;
    rest >> type >> role >> alias;
    try {
      b.type = parse_type(type);
    } catch (const IRError& e) {
      fail(e.what());
    }
    bool known = false;
    for (int r = 0; r <= static_cast<int>(Buffer::Role::Interior) && !known; ++r)
      if (role_name(static_cast<Buffer::Role>(r)) == role) b.role = static_cast<Buffer::Role>(r), known = true;
    if (!known) fail("unknown buffer role '" + role + "'");
    if (b.role == Buffer::Role::Alias)
      b.alias_of = buffer_ref(alias);
    else if (b.role == Buffer::Role::Input && alias == "donated")
      b.donated = true;
    else if (!alias.empty())
      fail("unexpected '" + alias + "' after the role");
    p_.buffers.push_back(std::move(b));
  }

  void kernel(const std::string& header) {
    std::istringstream in(header.substr(8));
    Kernel k;
    std::string kind;
    in >> k.name >> kind;
    const auto parsed = fusion::parse_group_kind(kind);
    if (!parsed) fail("unknown kernel kind '" + kind + "'");
    k.kind = *parsed;
    for (std::string field; in >> field;) {
      const size_t eq = field.find('=');
      const std::string key = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
      if (key == "grid")
        k.grid = dims(value);
      else if (key == "block")
        k.block = dims(value);
      else if (key == "shared")
        k.shared_bytes = number(value);
      else if (key == "vector")
        k.vector_width = number(value);
      else if (key == "align")
        k.align_bytes = number(value);
      else if (key == "variants")
        k.variants.resize(number(value));
      else if (key == "constants")
        k.constants = list(value);
      else if (key == "cutlass" && value.empty())
        k.cutlass = true;
      else if (key == "sm90a" && value.empty())
        k.sm90a = true;
      else
        fail("unknown kernel field '" + field + "'");
    }
    // Its graph: from 'graph @' to the '}' that closes it.
    std::string graph;
    if (!starts_with(peek(), "graph @")) fail("expected the kernel's graph");
    for (;;) {
      const std::string line = raw_peek();
      if (!starts_with(line, "    ")) fail("expected the kernel's graph, indented by 4");
      graph += line.substr(4) + "\n";
      line_++;
      if (trim(line) == "}") break;
    }
    try {
      const auto g = ff::parse(graph);
      for (const Value* v : g->inputs()) k.graph_inputs.push_back(buffer_ref("%" + v->name));
    } catch (const IRError& e) {
      fail(std::string("the kernel's graph: ") + e.what());
    }
    k.graph = graph;
    p_.kernels.push_back(std::move(k));
    if (!at_item() || peek() != "library:") return;
    line_++;
    while (line_ < lines_.size() && starts_with(lines_[line_], "      "))
      library_.emplace_back(p_.kernels.size() - 1, next());
    if (library_.empty() || library_.back().first != p_.kernels.size() - 1) fail("expected the library form's steps");
  }

  int64_t number(const std::string& s) const {
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size() && v >= 0) return v;
    } catch (const std::exception&) {}
    fail("expected a non-negative integer, got '" + s + "'");
  }
  std::vector<int64_t> list(const std::string& s) const {
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') fail("expected [X,...], got '" + s + "'");
    std::vector<int64_t> out;
    std::istringstream in(s.substr(1, s.size() - 2));
    for (std::string part; std::getline(in, part, ',');) out.push_back(number(part));
    return out;
  }
  std::array<int64_t, 3> dims(const std::string& s) const {
    std::array<int64_t, 3> d{};
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') fail("expected [X,Y,Z], got '" + s + "'");
    std::istringstream in(s.substr(1, s.size() - 2));
    std::string part;
    for (int64_t& x : d) {
      if (!std::getline(in, part, ',')) fail("expected three sizes in '" + s + "'");
      x = number(part);
    }
    if (std::getline(in, part, ',')) fail("expected three sizes in '" + s + "'");
    return d;
  }

  // The graph that call and view lines are parsed into: its inputs are the
  // declared buffers that no call or view line defines.
  void graph_inputs(std::initializer_list<const std::vector<std::string>*> sections) {
    std::unordered_set<std::string> defined;
    for (const auto* section : sections)
      for (const std::string& s : *section) {
        if (!starts_with(s, "call ") && !starts_with(s, "view ")) continue;
        const size_t eq = s.find(" = ");
        if (eq == std::string::npos) continue;  // reported when the step is parsed
        std::istringstream names(s.substr(5, eq - 5));
        for (std::string n; std::getline(names, n, ',');) defined.insert(trim(n));
      }
    p_.graph = std::make_unique<Graph>();
    p_.graph->name = p_.name;
    for (const Buffer& b : p_.buffers)
      if (!defined.count("%" + b.name)) p_.graph->add_input(b.name, b.type);
  }

  std::vector<Step> steps(const std::vector<std::string>& lines) {
    std::vector<Step> out;
    for (const std::string& s : lines) out.push_back(step(s));
    return out;
  }

  Step step(const std::string& s) {
    Step st;
    if (starts_with(s, "call ") || starts_with(s, "view ")) {
      st.kind = s[0] == 'c' ? Step::Kind::Call : Step::Kind::View;
      try {
        st.node = parse_node(*p_.graph, s.substr(5));
      } catch (const IRError& e) {
        fail(e.what());
      }
      for (const Operand& o : st.node->operands) {
        Arg a;
        if (o.is_value())
          a.buffer = buffer_ref("%" + o.value->name);
        else
          a.literal = o.literal;
        st.operands.push_back(a);
      }
      for (const Value* r : st.node->results) {
        st.results.push_back(buffer_ref("%" + r->name));
        if (!(p_.buffers[st.results.back()].type == r->type)) fail("'%" + r->name + "' has another type than declared");
      }
      return st;
    }
    if (starts_with(s, "free ")) {
      st.kind = Step::Kind::Free;
      st.results = refs(s.substr(5));
      return st;
    }
    if (!starts_with(s, "launch @")) fail("expected a step (call, view, launch or free), got '" + s + "'");
    st.kind = Step::Kind::Launch;
    const size_t space = s.find(' ', 8);
    const std::string name = s.substr(8, space - 8);
    for (size_t i = 0; i < p_.kernels.size(); ++i)
      if (p_.kernels[i].name == name) st.kernel = static_cast<int>(i);
    if (st.kernel < 0) fail("launch of unknown kernel '@" + name + "'");
    Kernel& k = p_.kernels[st.kernel];
    const size_t arrow = s.find(") <- (");
    const size_t close = s.find(')', arrow + 6);
    if (space == std::string::npos || s.compare(space, 2, " (") != 0 || arrow == std::string::npos ||
        close == std::string::npos)
      fail("expected 'launch @NAME (OUTPUTS) <- (INPUTS)'");
    std::vector<std::string> over;  // per output: the input it is written over ("": none)
    std::istringstream outs(s.substr(space + 2, arrow - space - 2));
    for (std::string item; std::getline(outs, item, ',');) {
      item = trim(item);
      const size_t sp = item.find(" over ");
      k.outputs.push_back(buffer_ref(item.substr(0, sp)));
      over.push_back(sp == std::string::npos ? "" : item.substr(sp + 6));
    }
    std::istringstream ins(s.substr(arrow + 6, close - arrow - 6));
    for (std::string item; std::getline(ins, item, ',');) {
      item = trim(item);
      KernelInput in;
      const size_t sp = item.find(' ');
      in.buffer = buffer_ref(item.substr(0, sp));
      in.memory = p_.memory_of(in.buffer);
      if (sp != std::string::npos) {
        if (item.substr(sp + 1) != "relayout") fail("unexpected '" + item.substr(sp + 1) + "' after a kernel input");
        in.relayout = true;
      }
      k.inputs.push_back(in);
    }
    for (size_t o = 0; o < over.size(); ++o) {
      if (over[o].empty()) continue;
      const int b = buffer_ref(over[o]);
      auto in = std::find_if(k.inputs.begin(), k.inputs.end(), [&](const KernelInput& i) { return i.buffer == b; });
      if (in == k.inputs.end()) fail("output written over '" + over[o] + "', which the kernel does not read");
      if (k.over.empty()) k.over.assign(k.outputs.size(), -1);
      k.over[o] = static_cast<int>(in - k.inputs.begin());
    }
    const std::string tail = s.substr(close + 1);
    if (starts_with(tail, " scalars (") && tail.back() == ')')
      k.scalars = refs(tail.substr(10, tail.size() - 11));
    else if (!tail.empty())
      fail("unexpected '" + tail + "' after the launch");
    return st;
  }
};

}  // namespace

Plan parse(const std::string& text) { return Parser(text).plan(); }

}  // namespace ff::plan
