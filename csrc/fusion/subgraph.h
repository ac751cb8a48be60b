#pragma once
#include <memory>

#include "kernel/group.h"

namespace ff::fusion {

// The group as a standalone graph: its inputs become graph inputs (same names
// and types; scalar inputs stay scalar), its nodes are copied, its outputs are
// the graph outputs. The interpreter runs it to check a kernel's meaning.
std::unique_ptr<Graph> extract_subgraph(const Group& group, const std::string& name);

}  // namespace ff::fusion
