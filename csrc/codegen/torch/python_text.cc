#include "codegen/torch/python_text.h"

#include <cctype>
#include <cmath>

namespace ff::codegen::py {

std::string boolean(bool v) { return v ? "True" : "False"; }

std::string number(double v) {
  // The IR's shortest round-trip text is valid Python for finite values.
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  return format_scalar(Scalar::of_float(v));
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

std::string str(const std::string& s) { return quote_string(s, '\''); }

std::string attr(const AttrValue& a) {
  struct {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return number(v); }
    std::string operator()(bool v) const { return boolean(v); }
    std::string operator()(const std::string& v) const { return str(v); }
    std::string operator()(const std::vector<int64_t>& v) const { return ints(v); }
  } visitor;
  return std::visit(visitor, a);
}

std::string dtype(DType t) { return "torch." + std::string(dtype_info(t).torch); }

namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A one-pass rewriter of capture's argument grammar; `pos` walks `text`.
class OpaqueRewriter {
 public:
  OpaqueRewriter(const std::string& text, const std::vector<std::string>& operands, const std::string& target)
      : text_(text), operands_(operands), target_(target) {}

  std::string run() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\'' || c == '"')
        out_ += string_literal();
      else if (c == '$')
        operand();
      else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.')
        out_ += number_literal();
      else if (ident_start(c))
        name();
      else if (std::string_view(" []{}(),:-+").find(c) != std::string_view::npos)
        out_ += text_[pos_++];
      else
        error("unexpected character '" + std::string(1, c) + "'");
    }
    return out_;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw IRError("opaque " + target_ + ": " + what + " in arguments " + text_);
  }

  std::string string_literal() {
    size_t start = pos_;
    char quote = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != quote) pos_ += text_[pos_] == '\\' ? 2 : 1;
    if (pos_ >= text_.size()) error("unterminated string");
    ++pos_;
    return text_.substr(start, pos_ - start);
  }

  std::string number_literal() {
    size_t start = pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      bool exponent_sign = (c == '+' || c == '-') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E');
      if (!(ident_char(c) || c == '.' || exponent_sign)) break;
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }

  std::string identifier() {
    size_t start = pos_;
    while (pos_ < text_.size() && ident_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  void operand() {
    ++pos_;
    size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_) error("'$' without an operand number");
    size_t k = std::stoul(text_.substr(start, pos_ - start));
    if (k >= operands_.size()) error("operand $" + std::to_string(k) + " of " + std::to_string(operands_.size()));
    out_ += operands_[k];
  }

  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  // Skips a parenthesized argument list (strings may hold parentheses).
  void skip_call_arguments() {
    int depth = 0;
    do {
      if (at('\'') || at('"')) {
        string_literal();
        continue;
      }
      if (at('(')) ++depth;
      if (at(')')) --depth;
      ++pos_;
    } while (pos_ < text_.size() && depth > 0);
    if (depth != 0) error("unbalanced parentheses");
  }

  void name() {
    std::string id = identifier();
    if (id == "True" || id == "False" || id == "None")
      out_ += id;
    else if (id == "inf" || id == "nan")
      out_ += "float('" + id + "')";
    else if (id == "torch" && at('.')) {
      ++pos_;
      std::string attr = identifier();
      if (attr == "device" && at('(')) {
        skip_call_arguments();
        out_ += "dev";  // the device the plan runs on, whatever capture saw
      } else if (attr.empty() || at('(') || at('.')) {
        error("unexpected torch." + attr);
      } else {
        out_ += "torch." + attr;  // torch.float32, torch.contiguous_format, ...
      }
    } else {
      error("unexpected name '" + id + "'");
    }
  }

  const std::string& text_;
  const std::vector<std::string>& operands_;
  const std::string& target_;
  size_t pos_ = 0;
  std::string out_;
};

}  // namespace

std::string opaque_arguments(const std::string& text, const std::vector<std::string>& operands,
                             const std::string& target) {
  return OpaqueRewriter(text, operands, target).run();
}

}  // namespace ff::codegen::py
