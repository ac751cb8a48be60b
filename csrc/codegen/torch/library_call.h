#pragma once
// The torch form of an IR node: the Python expression that computes it as a
// library call, for the executor (which compiles it once per step) and for
// `fuseforge emit` (which writes it into ModelNew), so both run the same call.
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ff::codegen {

// Python source of a torch expression computing node `n` (a tensor, or for
// an opaque node whatever its ATen op returns) over `operands`, the source
// text of each operand in order; `dev` names the device. Opaque nodes call
// torch.ops.<target>(*args, **kwargs) with their captured argument text,
// `$k` replaced by operand k, devices by `dev`, inf/nan by float(...).
// Throws IRError for a node it cannot express (missing attributes, opaque
// argument text outside capture's grammar).
std::string torch_expr(const Node& n, const std::vector<std::string>& operands);

}  // namespace ff::codegen
