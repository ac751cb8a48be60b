#include "passes/pass.h"

namespace ff::passes {

PassManager::PassManager(std::vector<std::string> names, PassOptions options)
    : names_(std::move(names)), options_(std::move(options)) {
  for (auto& n : names_) create_pass(n);  // unknown names fail here, not mid-pipeline
}

void PassManager::run(Graph& g, int max_rounds,
                      const std::function<void(std::string_view, const Graph&)>& trace) const {
  for (int round = 0; round < max_rounds; ++round) {
    bool changed = false;
    for (auto& name : names_) {
      auto pass = create_pass(name);
      pass->configure(options_);
      // A pass that changed nothing says so (the fixed point depends on it),
      // so only a changed graph is verified again: verifying a whole network
      // after every pass of every round was a third of its passes' time.
      if (!pass->run(g)) continue;
      try {
        verify(g);
      } catch (const IRError& e) {
        throw IRError("after pass '" + name + "': " + e.what());
      }
      if (trace) trace(name, g);
      changed = true;
    }
    if (!changed) return;
  }
}

}  // namespace ff::passes
