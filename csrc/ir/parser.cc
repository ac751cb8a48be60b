// Reads the text form that printer.cc writes (grammar: docs/IR.md).
// Errors are IRError("line L, col C: what was expected").
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "ir/graph.h"

namespace ff {

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text, Graph* g = nullptr) : s_(text), g_(g) {}

  // The whole text is one node line, appended to the graph given.
  Node* node_line() {
    node();
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the node");
    return g_->nodes().back().get();
  }
  TensorType whole_type() {
    TensorType t = type();
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the type");
    return t;
  }

  std::unique_ptr<Graph> graph() {
    auto g = std::make_unique<Graph>();
    g_ = g.get();
    keyword("graph");
    expect('@');
    g->name = ident();
    expect('(');
    if (!accept(')')) {
      do {
        std::string name = value_name();
        expect(':');
        TensorType t = type();
        InputKind kind = InputKind::User;
        skip_space();
        if (std::isalpha(peek())) {
          std::string k = ident();
          if (k == "param")
            kind = InputKind::Param;
          else if (k == "buffer")
            kind = InputKind::Buffer;
          else if (k == "const")
            kind = InputKind::Const;
          else if (k == "scalar")
            kind = InputKind::Scalar;
          else
            fail("unknown input kind '" + k + "'");
        }
        wrap([&] { g->add_input(name, t, kind); });
      } while (accept(','));
      expect(')');
    }
    expect('{');
    for (;;) {
      skip_space();
      if (accept('}')) break;
      if (std::isalpha(peek())) {
        std::string kw = ident();
        if (kw == "return") {
          skip_space_inline();
          if (peek() == '%') {
            do g->add_output(use());
            while (accept(','));
          }
        } else if (kw == "mutate") {
          Value* buf = use();
          expect('=');
          Value* v = use();
          g->add_mutation(buf, v);
        } else {
          fail("expected a node, 'return' or 'mutate', got '" + kw + "'");
        }
        continue;
      }
      node();
    }
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the graph");
    return g;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
  Graph* g_ = nullptr;

  [[noreturn]] void fail(const std::string& msg) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        line++, col = 1;
      else
        col++;
    }
    throw IRError("line " + std::to_string(line) + ", col " + std::to_string(col) + ": " + msg);
  }
  template <class F>
  void wrap(F f) {
    try {
      f();
    } catch (const IRError& e) {
      fail(e.what());
    }
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    for (;;) {
      while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) pos_++;
      if (s_.compare(pos_, 2, "//") == 0) {
        while (pos_ < s_.size() && s_[pos_] != '\n') pos_++;
        continue;
      }
      return;
    }
  }
  // Spaces and tabs only: `return` with no values ends at the newline.
  void skip_space_inline() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) pos_++;
  }
  bool accept(char c) {
    skip_space();
    if (peek() == c) {
      pos_++;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
  std::string ident() {
    skip_space();
    size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) pos_++;
    if (b == pos_) fail("expected an identifier");
    return s_.substr(b, pos_ - b);
  }
  void keyword(const char* kw) {
    if (ident() != kw) fail(std::string("expected '") + kw + "'");
  }
  std::string value_name() {
    expect('%');
    size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) pos_++;
    if (b == pos_) fail("expected a value name after '%'");
    return s_.substr(b, pos_ - b);
  }
  Value* use() {
    skip_space();
    size_t at = pos_;
    std::string n = value_name();
    Value* v = g_->find_value(n);
    if (!v) {
      pos_ = at;
      fail("use of undefined value '%" + n + "'");
    }
    return v;
  }
  int64_t integer() {
    skip_space();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s_.c_str() + pos_, &end, 10);
    if (end == s_.c_str() + pos_) fail("expected an integer");
    if (errno == ERANGE) fail("integer out of the int64 range");
    pos_ = end - s_.c_str();
    return v;
  }
  // A number literal: float if it has '.', 'e', or is inf/nan; int otherwise.
  Scalar number() {
    skip_space();
    size_t b = pos_;
    if (peek() == '-' || peek() == '+') pos_++;
    if (s_.compare(pos_, 3, "inf") == 0 || s_.compare(pos_, 3, "nan") == 0) {
      bool nan = s_[pos_] == 'n';
      pos_ += 3;
      double v = nan ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
      return Scalar::of_float(s_[b] == '-' ? -v : v);
    }
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' || s_[pos_] == 'e' ||
            s_[pos_] == 'E' || ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))))
      pos_++;
    std::string tok = s_.substr(b, pos_ - b);
    if (tok.empty() || tok == "-" || tok == "+") {
      pos_ = b;
      fail("expected a number");
    }
    char* end = nullptr;
    if (tok.find_first_of(".eE") != std::string::npos) {
      double v = std::strtod(tok.c_str(), &end);
      if (*end) fail("malformed number '" + tok + "'");
      return Scalar::of_float(v);
    }
    errno = 0;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end) fail("malformed number '" + tok + "'");
    if (errno == ERANGE) fail("integer '" + tok + "' out of the int64 range");
    return Scalar::of_int(v);
  }
  bool starts_number() {
    skip_space();
    char c = peek();
    return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || s_.compare(pos_, 3, "inf") == 0 ||
           s_.compare(pos_, 3, "nan") == 0;
  }
  TensorType type() {
    std::string dt = ident();
    auto d = parse_dtype(dt);
    if (!d) fail("unknown dtype '" + dt + "'");
    TensorType t;
    t.dtype = *d;
    expect('[');
    if (!accept(']')) {
      do t.shape.push_back(integer());
      while (accept(','));
      expect(']');
    }
    for (int64_t dim : t.shape)
      if (dim < 0) fail("negative dimension in type");
    wrap([&] {
      numel(t.shape);  // throws when the sizes overflow int64
      t.strides = contiguous_strides(t.shape);
    });
    skip_space_inline();
    if (peek() == '{') {
      expect('{');
      t.strides.clear();
      do t.strides.push_back(integer());
      while (accept(','));
      expect('}');
      if (t.strides.size() != t.shape.size()) fail("stride count differs from the rank");
      for (int64_t st : t.strides)
        if (st < 0) fail("negative stride in type");
    }
    return t;
  }
  std::string string_literal() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        out += e == 'n' ? '\n' : e;
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    pos_++;
    return out;
  }
  AttrValue attr_value() {
    skip_space();
    char c = peek();
    if (c == '"') return string_literal();
    if (c == '[') {
      expect('[');
      std::vector<int64_t> v;
      if (!accept(']')) {
        do v.push_back(integer());
        while (accept(','));
        expect(']');
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) && s_.compare(pos_, 3, "inf") != 0 &&
        s_.compare(pos_, 3, "nan") != 0) {
      std::string w = ident();
      if (w == "true") return true;
      if (w == "false") return false;
      fail("expected an attribute value, got '" + w + "'");
    }
    Scalar n = number();
    if (n.kind == Scalar::Kind::Float) return n.f;
    return n.i;
  }
  Operand operand() {
    skip_space();
    if (peek() == '%') return Operand::of(use());
    if (starts_number()) return Operand::of(number());
    std::string w = ident();
    if (w == "true") return Operand::of(Scalar::of_bool(true));
    if (w == "false") return Operand::of(Scalar::of_bool(false));
    fail("expected an operand, got '" + w + "'");
  }
  void node() {
    std::vector<std::string> names;
    do names.push_back(value_name());
    while (accept(','));
    expect('=');
    size_t op_at = pos_;
    std::string opname = ident();
    auto op = parse_op(opname);
    if (!op) {
      pos_ = op_at;
      skip_space();
      fail("unknown op '" + opname + "'");
    }
    expect('(');
    std::vector<Operand> operands;
    if (!accept(')')) {
      do operands.push_back(operand());
      while (accept(','));
      expect(')');
    }
    Attrs attrs;
    if (accept('{')) {
      do {
        std::string key = ident();
        expect('=');
        attrs[key] = attr_value();
      } while (accept(','));
      expect('}');
    }
    expect(':');
    std::vector<TensorType> types;
    do types.push_back(type());
    while (accept(','));
    if (types.size() != names.size())
      fail(std::to_string(names.size()) + " result names but " + std::to_string(types.size()) + " result types");
    wrap([&] { g_->add_node(*op, std::move(operands), std::move(types), std::move(attrs), names); });
  }
};

}  // namespace

std::unique_ptr<Graph> parse(const std::string& text) { return Parser(text).graph(); }
Node* parse_node(Graph& g, const std::string& line) { return Parser(line, &g).node_line(); }
TensorType parse_type(const std::string& text) { return Parser(text).whole_type(); }

}  // namespace ff
