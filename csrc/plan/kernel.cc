// Kernel::compile_key (plan.h).
#include <sstream>

#include "plan/plan.h"

namespace ff::plan {

namespace {

// `line` up to its `//` comment, if any (one inside a string literal does not count).
std::string_view code_of(std::string_view line) {
  bool in_string = false;
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) in_string = !in_string;
    if (!in_string && line[i] == '/' && line[i + 1] == '/') return line.substr(0, i);
  }
  return line;
}

}  // namespace

std::string Kernel::compile_key() const {
  std::string key = std::string(cutlass ? "cutlass" : "") + (sm90a ? " sm90a" : "") + "\n";
  std::istringstream lines(translation_unit());
  for (std::string line; std::getline(lines, line);) {
    std::string code(code_of(line));
    if (code.find_first_not_of(" \t") == std::string::npos) continue;
    // Every occurrence, the name's own helpers (`<name>_params`) included.
    for (size_t at = code.find(name); at != std::string::npos; at = code.find(name, at + 2))
      code.replace(at, name.size(), "@K");
    key += code;
    key += '\n';
  }
  return key;
}

}  // namespace ff::plan
