#pragma once
// Graph-to-graph rewrites. Each pass lives in its own file and is registered
// by name in pass_registry.cc; PassManager runs a list of them, verifying the
// graph after each one.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace ff::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Rewrites `g` in place; returns whether anything changed.
  virtual bool run(Graph& g) = 0;
};

// Creates a registered pass; throws IRError listing the known names if unknown.
std::unique_ptr<Pass> create_pass(std::string_view name);
std::vector<std::string> pass_names();
// The passes fuseforge runs by default, in order.
std::vector<std::string> default_pipeline();

class PassManager {
 public:
  explicit PassManager(std::vector<std::string> names = default_pipeline());
  // Runs each pass once, in order, then repeats the list until nothing changes
  // (at most `max_rounds` times). Verifies after every pass; a verifier error
  // names the pass that broke the graph. `trace`, if set, receives
  // (pass name, IR after the pass) for every pass that changed the graph.
  void run(Graph& g, int max_rounds = 4,
           const std::function<void(std::string_view, const Graph&)>& trace = {}) const;

 private:
  std::vector<std::string> names_;
};

}  // namespace ff::passes
