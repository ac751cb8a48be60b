#pragma once
// Python source text of IR values, for torch expressions.
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ff::codegen::py {

std::string boolean(bool v);                       // True / False
std::string number(double v);                      // 0.5, 1e-05, float('inf')
std::string ints(const std::vector<int64_t>& v);   // [1, 2]
std::string tuple(const std::vector<int64_t>& v);  // (1,), (1, 2)
std::string str(const std::string& s);             // 'none'
std::string attr(const AttrValue& a);              // any attribute, as Python
std::string dtype(DType t);                        // torch.float32
// `$k` operand references, inf/nan and torch.device(...) in an opaque node's
// captured argument text (capture's grammar: literals, lists, dicts, `$k`,
// inf/nan, torch.<name>, torch.device(...)) rewritten as source over
// `operands` and `dev`. Throws IRError naming `target` for anything else.
std::string opaque_arguments(const std::string& text, const std::vector<std::string>& operands,
                             const std::string& target);

}  // namespace ff::codegen::py
