#include "plan_runner.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "fusion/subgraph.h"
#include "kernel_emulator.h"

namespace ff::testing {

std::vector<interp::HostTensor> run_plan(const CompiledGraph& cg, const std::vector<interp::HostTensor>& inputs,
                                         bool library_forms) {
  const Graph& g = *cg.plan.graph;
  std::unordered_map<const Value*, interp::HostTensor> env;
  for (size_t i = 0; i < g.inputs().size(); ++i) env[g.inputs()[i]] = inputs.at(i);
  auto gather = [&](const std::vector<Value*>& values) {
    std::vector<interp::HostTensor> in;
    for (const Value* v : values) in.push_back(env.at(v));
    return in;
  };
  auto emulate = [&](const fusion::Group& group, const codegen::KernelSource& k, const std::vector<int>& over) {
    auto out = emulate_kernel(k, group, gather(group.inputs), over);
    for (size_t i = 0; i < group.outputs.size(); ++i) {
      // emulate_kernel returns the outputs in the kernel's parameter order.
      for (size_t j = 0; j < k.outputs.size(); ++j)
        if (k.outputs[j] == group.outputs[i]->name) env[group.outputs[i]] = out[j];
    }
  };
  auto call = [&](Node* node) {
    fusion::Group one;
    one.nodes = {node};
    for (auto& o : node->operands)
      if (o.is_value()) one.inputs.push_back(o.value);
    one.outputs = {node->result()};
    auto out = interp::run(*fusion::extract_subgraph(one, "step"), gather(one.inputs));
    env[node->result()] = out.at(0);
  };
  for (const auto& step : cg.partition.steps) {
    if (step.kind == fusion::Step::Kind::Node) {
      call(step.node);
      continue;
    }
    const fusion::Group& group = cg.partition.groups[step.group];
    if (library_forms && group.library_epilogue >= 0) {
      call(group.nodes.front());
      const size_t e = cg.partition.groups.size() + group.library_epilogue;
      emulate(cg.partition.library_epilogues[group.library_epilogue], cg.kernels[e], {});
      continue;
    }
    // Outputs written over inputs as the plan launches them: the kernel must
    // read each element before it writes there.
    emulate(group, cg.kernels[step.group], cg.plan.kernels[step.group].over);
  }
  std::vector<interp::HostTensor> result;
  for (const Value* v : g.outputs()) result.push_back(env.at(v));
  for (const auto& m : g.mutations()) result.push_back(env.at(m.value));
  return result;
}

std::string compare(const std::vector<interp::HostTensor>& got, const std::vector<interp::HostTensor>& want,
                    double rtol, double atol) {
  if (got.size() != want.size()) return "output count " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto &a = got[i], &b = want[i];
    if (a.shape != b.shape || a.data.size() != b.data.size()) return "output " + std::to_string(i) + ": shape differs";
    const bool exact = !is_floating(b.dtype);
    // 16-bit results may round the other way after another summation order: one ulp.
    const double ulp = b.dtype == DType::f16 ? 1.0 / 1024 : b.dtype == DType::bf16 ? 1.0 / 128 : 0.0;
    const double rt = std::max(rtol, ulp), at = std::max(atol, ulp);
    for (size_t k = 0; k < a.data.size(); ++k) {
      const double x = a.data[k], y = b.data[k];
      const bool same = std::isnan(y) ? std::isnan(x) : x == y || (!exact && std::abs(x - y) <= at + rt * std::abs(y));
      if (!same)
        return "output " + std::to_string(i) + " element " + std::to_string(k) + ": got " + std::to_string(x) +
               ", want " + std::to_string(y);
    }
  }
  return "";
}

}  // namespace ff::testing
