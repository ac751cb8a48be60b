#include "pipeline/compile.h"

#include "codegen/cuda/gemm.h"
#include "codegen/cuda/gemm_sm90.h"
#include "codegen/cuda/pointwise.h"
#include "fusion/split_gemm_reduction.h"
#include "fusion/subgraph.h"
#include "passes/pass.h"

namespace ff {

CompiledGraph compile_graph(const std::string& ir_text, const CompileOptions& options) {
  CompiledGraph out;
  out.graph = parse(ir_text);
  verify(*out.graph);
  out.ir_before = print(*out.graph);
  passes::PassManager pm(options.passes.empty() ? passes::default_pipeline() : options.passes);
  auto trace = [&](std::string_view pass, const Graph& g) {
    out.pass_trace.emplace_back(std::string(pass), print(g));
  };
  if (options.trace_passes) pm.run(*out.graph, 4, trace);
  else pm.run(*out.graph);
  if (fusion::split_gemm_reductions(*out.graph, options.gemm_dtypes)) verify(*out.graph);
  out.ir_after = print(*out.graph);
  out.partition = fusion::partition(*out.graph, {options.gemm_dtypes, options.tf32});
  for (size_t i = 0; i < out.partition.groups.size(); ++i) {
    const auto& group = out.partition.groups[i];
    const int id = static_cast<int>(i);
    const bool gemm = group.kind == fusion::PointwiseGroup::Kind::Gemm;
    const bool sm90 = gemm && options.arch == 90 && codegen::sm90_gemm_applies(group.gemm);
    out.kernels.push_back(sm90   ? codegen::generate_gemm_sm90(group, group.gemm, id)
                          : gemm ? codegen::generate_gemm(group, group.gemm, id)
                                 : codegen::generate_pointwise(group, id));
    out.kernel_graphs.push_back(print(*fusion::extract_subgraph(group, out.kernels.back().name)));
    out.kernel_variants.push_back(options.gemm_variants && gemm && !sm90 ? codegen::gemm_variants(group, group.gemm, id)
                                                                         : std::vector<codegen::KernelSource>{});
  }
  return out;
}

}  // namespace ff
