#include "pipeline/compile.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>

#include "fusion/scheduler.h"
#include "passes/pass.h"

namespace ff {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"fp32", "tf32"};
  return names;
}

std::string_view precision_name(Precision p) { return precision_names().at(static_cast<size_t>(p)); }

Precision parse_precision(std::string_view name) {
  const auto& names = precision_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<Precision>(i);
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("precision '" + std::string(name) + "' is not available; available: " + known);
}

GemmPolicy parse_gemm_policy(std::string_view name) {
  if (name.empty() || name == "auto" || name == "f32") return GemmPolicy::Auto;
  if (name == "all" || name == "1") return GemmPolicy::All;
  if (name == "off" || name == "0") return GemmPolicy::Off;
  throw std::invalid_argument("GEMM kernel policy '" + std::string(name) +
                              "' is unknown; expected auto (f32), all (1) or off (0)");
}

std::vector<DType> gemm_dtypes(GemmPolicy policy, Precision precision) {
  switch (policy) {
    case GemmPolicy::All:
      return {DType::f32, DType::f16, DType::bf16};
    case GemmPolicy::Off:
      return {};
    case GemmPolicy::Auto:
      break;
  }
  return precision == Precision::fp32 ? std::vector<DType>{DType::f32} : std::vector<DType>{};
}

void set_conv_policy(CompileOptions& o, std::string_view policy) {
  if (policy != "direct" && !policy.empty() && policy != "auto" && policy != "1" && policy != "always" &&
      policy != "off" && policy != "0")
    throw std::invalid_argument("conv kernel policy '" + std::string(policy) +
                                "' is unknown; expected direct, auto (1), always or off (0)");
  const bool off = policy == "off" || policy == "0", implicit = policy == "auto" || policy == "1" || policy == "always";
  o.conv_direct = !off;
  o.conv_dtypes = implicit ? std::vector<DType>{DType::f32, DType::f16, DType::bf16} : std::vector<DType>{};
  o.conv_always = policy == "always";
}

CompileOptions parse_compile_flags(std::string_view flags) {
  CompileOptions o;
  GemmPolicy gemm = GemmPolicy::Auto;
  std::istringstream in{std::string(flags)};
  for (std::string f; in >> f;) {
    const size_t eq = f.find('=');
    const std::string key = f.substr(0, eq), value = eq == std::string::npos ? "" : f.substr(eq + 1);
    if (key == "--arch" && !value.empty() && value.find_first_not_of("0123456789") == std::string::npos)
      o.arch = std::stoi(value);
    else if (key == "--precision")
      o.precision = parse_precision(value);
    else if (key == "--gemm")
      gemm = parse_gemm_policy(value);
    else if (key == "--conv")
      set_conv_policy(o, value);
    else if (f == "--autotune")
      o.autotune = true;
    else if (f == "--release-inputs")
      o.release_inputs = true;
    else if (key == "--donated" && !value.empty()) {
      std::istringstream names(value);
      for (std::string name; std::getline(names, name, ',');) o.donated.push_back(name);
    } else
      throw std::invalid_argument("unknown or malformed flag '" + f +
                                  "' (flags: --arch=N --precision=P --gemm=POLICY --conv=POLICY --autotune "
                                  "--release-inputs --donated=NAME,..)");
  }
  o.gemm_dtypes = gemm_dtypes(gemm, o.precision);
  return o;
}

Target compile_target(const CompileOptions& options) {
  return options.target ? *options.target : target_for_arch(options.arch);
}

CompiledGraph compile_graph(const std::string& ir_text, const CompileOptions& options) {
  CompiledGraph out;
  auto clock = std::chrono::steady_clock::now();
  auto phase_done = [&](const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    out.phase_seconds.emplace_back(phase, std::chrono::duration<double>(now - clock).count());
    clock = now;
  };
  std::unique_ptr<Graph> graph = parse(ir_text);
  verify(*graph);
  out.ir_before = print(*graph);
  phase_done("parse");
  auto trace = [&](std::string_view pass, const Graph& g) { out.pass_trace.emplace_back(std::string(pass), print(g)); };
  passes::PassOptions pass_options;
  pass_options.tf32 = options.precision == Precision::tf32;
  pass_options.eager_conv_tf32 = options.eager_conv_tf32;
  pass_options.conv_channels_last = options.conv_channels_last;
  pass_options.conv_cudnn = options.conv_cudnn;
  pass_options.conv_direct_ms = options.conv_direct_ms;
  pass_options.conv_kernels = !options.conv_dtypes.empty();
  pass_options.conv_always = options.conv_always;
  pass_options.conv_direct = options.conv_direct;
  pass_options.target = compile_target(options);
  auto run = [&](const std::vector<std::string>& names) {
    passes::PassManager pm(names, pass_options);
    if (options.trace_passes)
      pm.run(*graph, 4, trace);
    else
      pm.run(*graph);
  };
  run(options.passes.empty() ? passes::default_pipeline() : options.passes);
  // After the others, so that they see the final epilogues; only where f32
  // matmuls become GEMM kernels, which then run split along K or write block
  // partials.
  const auto& dtypes = options.gemm_dtypes;
  if (std::find(dtypes.begin(), dtypes.end(), DType::f32) != dtypes.end())
    run({"split_gemm_k", "split_gemm_reduction"});
  // Last and alone: cse would merge its copies back.
  if (options.passes.empty()) run({"recompute_pointwise"});
  out.ir_after = print(*graph);
  graph = parse(out.ir_after);  // value names as printed: the plan, its text and kernels use them
  phase_done("passes");
  fusion::FusionOptions fo;
  fo.gemm_dtypes = dtypes;
  fo.tf32 = options.precision == Precision::tf32;
  fo.arch = options.arch;
  fo.target = compile_target(options);
  fo.variants = options.autotune;
  fo.reductions = options.reductions;
  out.partition = fusion::partition(*graph, fo);
  phase_done("fusion");
  for (size_t i = 0; i < out.partition.groups.size(); ++i) {
    const fusion::Group& group = out.partition.groups[i];
    const fusion::Scheduler& scheduler = fusion::scheduler_for(group.kind);
    const int id = static_cast<int>(i);
    out.kernels.push_back(scheduler.generate(group, id, fo));
    out.kernel_variants.push_back(fo.variants ? scheduler.variants(group, id, fo)
                                              : std::vector<codegen::KernelSource>{});
  }
  // The conv kernels' epilogues alone, for their library forms: after every
  // group's kernel, as plan::build expects.
  for (const fusion::Group& epilogue : out.partition.library_epilogues) {
    const int id = static_cast<int>(out.kernels.size());
    out.kernels.push_back(fusion::scheduler_for(epilogue.kind).generate(epilogue, id, fo));
    out.kernel_variants.emplace_back();
  }
  phase_done("codegen");
  out.plan = plan::build(std::move(graph), out.partition, out.kernels, out.kernel_variants, options.release_inputs,
                         options.donated);
  phase_done("plan");
  return out;
}

}  // namespace ff
