// Python bindings (nanobind): the compiler driver, the interpreter and the
// kernel runtime. Tensors cross as raw device pointers and the stream as a
// handle, so the extension does not link libtorch.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "interp/interpreter.h"
#include "ir/conv.h"
#include "ir/graph.h"
#include "passes/pass.h"
#include "pipeline/compile.h"
#include "runtime/cache.h"
#include "runtime/check.h"
#include "runtime/compiler.h"
#include "runtime/cuda_libs.h"
#include "runtime/launcher.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::tuple type_tuple(const ff::TensorType& t) {
  return nb::make_tuple(std::string(ff::dtype_name(t.dtype)), nb::cast(t.shape), nb::cast(t.strides));
}

nb::object attr_to_py(const ff::AttrValue& a) {
  struct {
    nb::object operator()(int64_t v) const { return nb::cast(v); }
    nb::object operator()(double v) const { return nb::cast(v); }
    nb::object operator()(bool v) const { return nb::cast(v); }
    nb::object operator()(const std::string& v) const { return nb::cast(v); }
    nb::object operator()(const std::vector<int64_t>& v) const { return nb::cast(v); }
  } visitor;
  return std::visit(visitor, a);
}

nb::object scalar_to_py(const ff::Scalar& s) {
  switch (s.kind) {
    case ff::Scalar::Kind::Float: return nb::cast(s.f);
    case ff::Scalar::Kind::Int: return nb::cast(s.i);
    case ff::Scalar::Kind::Bool: return nb::cast(s.i != 0);
  }
  return nb::none();
}

// A node that runs as a library call, described for the Python executor.
nb::dict node_step(const ff::Node& n) {
  nb::list operands;
  for (auto& o : n.operands) {
    if (o.is_value()) operands.append(nb::make_tuple("value", o.value->name));
    else operands.append(nb::make_tuple("literal", scalar_to_py(o.literal)));
  }
  nb::dict attrs;
  for (auto& [k, v] : n.attrs) attrs[k.c_str()] = attr_to_py(v);
  nb::list results, types;
  for (ff::Value* r : n.results) {
    results.append(r->name);
    types.append(type_tuple(r->type));
  }
  nb::dict d;
  d["kind"] = "node";
  d["op"] = std::string(ff::op_name(n.op));
  d["operands"] = operands;
  d["attrs"] = attrs;
  d["results"] = results;
  d["result_types"] = types;
  d["text"] = ff::print_node(n);
  return d;
}

// The compiled plan, flattened into Python data.
nb::dict plan_to_py(const ff::CompiledGraph& cg) {
  nb::dict plan;
  plan["ir_before"] = cg.ir_before;
  plan["ir_after"] = cg.ir_after;
  nb::list trace;
  for (auto& [p, ir] : cg.pass_trace) trace.append(nb::make_tuple(p, ir));
  plan["pass_trace"] = trace;
  const ff::Graph& g = *cg.graph;
  nb::dict values;
  for (ff::Value* v : g.inputs()) values[v->name.c_str()] = type_tuple(v->type);
  for (auto& n : g.nodes())
    for (ff::Value* r : n->results) values[r->name.c_str()] = type_tuple(r->type);
  plan["values"] = values;
  nb::list inputs, outputs, mutations;
  for (ff::Value* v : g.inputs()) inputs.append(v->name);
  for (ff::Value* v : g.outputs()) outputs.append(v->name);
  for (auto& m : g.mutations()) mutations.append(nb::make_tuple(m.buffer->name, m.value->name));
  plan["inputs"] = inputs;
  plan["outputs"] = outputs;
  plan["mutations"] = mutations;
  nb::list kernels;
  for (size_t i = 0; i < cg.kernels.size(); ++i) {
    const auto& k = cg.kernels[i];
    nb::dict d;
    d["name"] = k.name;
    d["source"] = k.source;
    d["outputs"] = nb::cast(k.outputs);
    d["inputs"] = nb::cast(k.inputs);
    d["scalars"] = nb::cast(k.scalars);
    d["items"] = k.items;
    d["vector_width"] = k.vector_width;
    d["block"] = k.block;
    d["unroll"] = k.unroll;
    d["grid"] = nb::make_tuple(k.grid[0], k.grid[1], k.grid[2]);
    d["block_y"] = k.block_y;
    d["kind"] = std::string(ff::fusion::group_kind_name(cg.partition.groups[i].kind));
    d["cutlass"] = k.cutlass;
    d["sm90a"] = k.sm90a;
    d["shared_bytes"] = k.shared_bytes;
    d["align_bytes"] = k.align_bytes;
    d["graph"] = cg.kernel_graphs[i];
    nb::list variants;  // other tiles of a GEMM, same parameters (autotuning)
    for (const auto& v : cg.kernel_variants[i]) {
      nb::dict vd;
      vd["name"] = v.name;
      vd["source"] = v.source;
      vd["block"] = v.block;
      vd["grid"] = nb::make_tuple(v.grid[0], v.grid[1], v.grid[2]);
      vd["shared_bytes"] = v.shared_bytes;
      variants.append(vd);
    }
    d["variants"] = variants;
    nb::list nodes;  // the group's nodes, for running it op by op where no kernel can run
    for (const ff::Node* n : cg.partition.groups[i].nodes) nodes.append(node_step(*n));
    d["nodes"] = nodes;
    kernels.append(d);
  }
  plan["kernels"] = kernels;
  nb::list steps;
  for (auto& s : cg.partition.steps) {
    if (s.kind == ff::fusion::Step::Kind::Kernel) {
      nb::dict d;
      d["kind"] = "kernel";
      d["kernel"] = s.group;
      steps.append(d);
    } else {
      steps.append(node_step(*s.node));
    }
  }
  plan["steps"] = steps;
  return plan;
}

// The convolutions of an IR graph as the front end's precision probe needs
// them: signature (the key its answers are given back under) and parameters.
nb::list convolutions(const std::string& text) {
  auto g = ff::parse(text);
  ff::verify(*g);
  nb::list out;
  for (auto& n : g->nodes()) {
    const auto spec = ff::conv_spec(*n);
    if (!spec) continue;
    nb::dict d;
    d["signature"] = ff::conv_signature(*n);
    d["dtype"] = std::string(ff::dtype_name(spec->dtype));
    d["input"] = type_tuple(n->input(0)->type);
    d["weight"] = type_tuple(n->input(1)->type);
    d["stride"] = nb::cast(spec->stride);
    d["padding"] = nb::cast(spec->padding);
    d["dilation"] = nb::cast(spec->dilation);
    d["transposed"] = spec->transposed;
    d["output_padding"] = nb::cast(spec->output_padding);
    d["groups"] = spec->groups;
    d["flops"] = spec->flops();
    d["fp32_precision"] = n->has_attr("fp32_precision") ? n->attr_string("fp32_precision") : std::string();
    d["channels_last"] = ff::is_channels_last(n->result()->type);
    d["text"] = ff::print_node(*n);
    out.append(d);
  }
  return out;
}

using F64Array = nb::ndarray<nb::numpy, const double, nb::c_contig, nb::device::cpu>;

std::vector<nb::ndarray<nb::numpy, double>> interpret(const std::string& text, const std::vector<F64Array>& arrays) {
  auto g = ff::parse(text);
  ff::verify(*g);
  if (arrays.size() != g->inputs().size())
    throw ff::IRError("interpret: graph has " + std::to_string(g->inputs().size()) + " inputs, got " +
                      std::to_string(arrays.size()));
  std::vector<ff::interp::HostTensor> inputs;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const ff::Value* v = g->inputs()[i];
    ff::interp::HostTensor t;
    t.dtype = v->type.dtype;
    t.shape = v->type.shape;
    if (static_cast<int64_t>(arrays[i].size()) != ff::numel(t.shape))
      throw ff::IRError("interpret: input '%" + v->name + "' has " + std::to_string(arrays[i].size()) +
                        " elements, expected " + std::to_string(ff::numel(t.shape)));
    t.data.assign(arrays[i].data(), arrays[i].data() + arrays[i].size());
    inputs.push_back(std::move(t));
  }
  std::vector<ff::interp::HostTensor> results;
  {
    nb::gil_scoped_release release;
    results = ff::interp::run(*g, inputs);
  }
  std::vector<nb::ndarray<nb::numpy, double>> out;
  for (auto& r : results) {
    auto* data = new std::vector<double>(std::move(r.data));
    nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
    std::vector<size_t> shape(r.shape.begin(), r.shape.end());
    out.emplace_back(data->data(), shape.size(), shape.data(), owner);
  }
  return out;
}

bool env_is_one(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "1";
}

// Which matmuls run as generated GEMM kernels: `all` if given, else the
// FUSEFORGE_GEMM policy (compile.h's GemmPolicy); none without CUTLASS's headers.
std::vector<ff::DType> gemm_dtypes(std::optional<bool> all, ff::Precision precision) {
  const char* env = std::getenv("FUSEFORGE_GEMM");
  ff::GemmPolicy policy = ff::GemmPolicy::Auto;
  try {
    policy = all ? (*all ? ff::GemmPolicy::All : ff::GemmPolicy::Off) : ff::parse_gemm_policy(env != nullptr ? env : "");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("fuseforge: FUSEFORGE_GEMM is '" + std::string(env) + "': " + e.what());
  }
  if (!all && !ff::runtime::cutlass_available()) return {};
  return ff::gemm_dtypes(policy, precision);
}

// Which convolutions run as generated conv kernels: the policy `given`, else
// FUSEFORGE_CONV_KERNELS: "auto" (also "1": where the cost model prefers them
// to cuDNN), "always" (every conv one covers: tests and probes), "off" (also
// "0" and unset: off by default until measured on a GPU against cuDNN). Without
// CUTLASS's headers, none unless a policy is given.
void set_conv_policy(ff::CompileOptions& opts, const std::optional<std::string>& given) {
  const char* env = std::getenv("FUSEFORGE_CONV_KERNELS");
  const std::string policy = given ? *given : env != nullptr ? env : "off";
  if (policy == "off" || policy == "0" || policy.empty()) return;
  if (policy != "auto" && policy != "1" && policy != "always")
    throw std::invalid_argument("fuseforge: conv kernel policy '" + policy + "' is unknown; expected auto (1), always or off (0)");
  if (!given && !ff::runtime::cutlass_available()) return;
  opts.conv_dtypes = {ff::DType::f32, ff::DType::f16, ff::DType::bf16};
  opts.conv_always = policy == "always";
}

std::vector<std::string> kernel_options(bool cutlass) {
  if (!cutlass) return {};
  if (!ff::runtime::cutlass_available())
    throw ff::runtime::CudaError("fuseforge: a GEMM kernel needs CUTLASS's headers, and none were found "
                                 "(install nvidia-cutlass, see requirements-headers.txt)");
  return ff::runtime::cutlass_options();
}

// A compiled kernel bound to its launch geometry (see KernelSource).
class PointwiseKernel {
 public:
  PointwiseKernel(const std::string& source, const std::string& name, int arch, int64_t items, int block,
                  int unroll, std::vector<int64_t> grid, int block_y, int shared_bytes, bool cutlass, bool sm90a)
      : kernel_(ff::runtime::compile_cached(source, name, arch, kernel_options(cutlass), sm90a)),
        block_{static_cast<unsigned>(block), static_cast<unsigned>(block_y), 1},
        shared_bytes_(static_cast<unsigned>(shared_bytes)) {
    if (grid.size() == 3 && grid[0] > 0) {
      grid_ = {static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2])};
    } else {
      // Enough blocks for one pass (the kernel's grid-stride loop covers any excess).
      const int64_t per_block = int64_t{block} * unroll;
      grid_.x = static_cast<unsigned>(std::min<int64_t>((items + per_block - 1) / per_block, 0x7fffffff));
    }
  }

  void launch(int device, const std::vector<uintptr_t>& pointers, const std::vector<double>& scalars,
              uintptr_t stream) {
    if (grid_.x == 0) return;  // empty tensors
    std::vector<void*> args;
    args.reserve(pointers.size() + scalars.size());
    for (auto& p : pointers) args.push_back(const_cast<uintptr_t*>(&p));
    for (auto& s : scalars) args.push_back(const_cast<double*>(&s));
    kernel_.launch(device, grid_, block_, shared_bytes_, args.data(), stream);
  }
  const std::string& name() const { return kernel_.kernel().name; }

 private:
  ff::runtime::LoadedKernel kernel_;
  ff::runtime::Dim3 grid_{0, 1, 1};
  ff::runtime::Dim3 block_;
  unsigned shared_bytes_ = 0;
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "fuseforge C++ core: IR, passes, fusion, CUDA codegen and runtime";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ff::IRError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ff::runtime::CudaError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  m.def("normalize_ir", [](const std::string& text) {
    auto g = ff::parse(text);
    ff::verify(*g);
    return ff::print(*g);
  }, "text"_a, "Parses, verifies and prints IR text (raises ValueError on bad IR).");
  m.def("run_passes", [](const std::string& text, const std::vector<std::string>& passes) {
    auto g = ff::parse(text);
    ff::verify(*g);
    ff::passes::PassManager(passes).run(*g);
    return ff::print(*g);
  }, "text"_a, "passes"_a);
  m.def("pass_names", &ff::passes::pass_names);
  m.def("default_pipeline", &ff::passes::default_pipeline);
  m.def("interpret", &interpret, "text"_a, "inputs"_a,
        "Runs IR on the CPU reference interpreter; inputs and outputs are float64 numpy arrays.");
  m.def("compile_graph", [](const std::string& text, const std::vector<std::string>& passes, bool trace,
                            std::optional<bool> gemm, const std::string& precision, int arch,
                            const std::map<std::string, bool>& conv_tf32,
                            const std::map<std::string, bool>& conv_channels_last,
                            const std::optional<std::string>& conv) {
    ff::CompileOptions opts;
    set_conv_policy(opts, conv);
    opts.eager_conv_tf32 = conv_tf32;
    opts.conv_channels_last = conv_channels_last;
    opts.passes = passes;
    opts.trace_passes = trace;
    opts.precision = ff::parse_precision(precision);
    opts.gemm_dtypes = gemm_dtypes(gemm, opts.precision);
    opts.autotune = !(opts.gemm_dtypes.empty() && opts.conv_dtypes.empty()) && env_is_one("FUSEFORGE_AUTOTUNE");
    opts.arch = arch;
    return plan_to_py(ff::compile_graph(text, opts));
  }, "text"_a, "passes"_a = std::vector<std::string>{}, "trace"_a = false, "gemm"_a = nb::none(),
     "precision"_a = "fp32", "arch"_a = 0, "conv_tf32"_a = std::map<std::string, bool>{},
     "conv_channels_last"_a = std::map<std::string, bool>{}, "conv"_a = nb::none(),
     "gemm: True: matmuls of every dtype as generated GEMM kernels, False: none; default: FUSEFORGE_GEMM "
     "(unset: f32 ones only, and none under tf32; 1: all; 0: none), none without CUTLASS's headers. "
     "precision: fp32 (f32 GEMM kernels in 3xTF32) or tf32 (plain TF32, opt-in). "
     "arch: the target GPU's compute capability (90: Hopper wgmma GEMM kernels where they apply; 0: unknown). "
     "with FUSEFORGE_AUTOTUNE=1 each GEMM kernel also lists its other tile candidates as `variants`. "
     "conv_tf32: per conv signature (see convolutions()), whether eager's conv uses TF32 (else the fp32 "
     "policy keeps it IEEE); conv_channels_last: per signature, whether it timed faster channels-last. "
     "conv: 'auto': convs may become generated implicit-GEMM kernels where the cost model prefers them to "
     "cuDNN, 'always': every conv one covers, 'off'; default: FUSEFORGE_CONV_KERNELS (unset: off), and "
     "none without CUTLASS's headers");
  m.def("convolutions", &convolutions, "text"_a,
        "The graph's convolutions: signature, dtype, input/weight types, parameters, fp32_precision and "
        "whether the result is channels-last (for the precision probe and diagnostics).");

  m.def("nvrtc_compile", [](const std::string& source, const std::string& name, int arch, bool cutlass,
                            const std::vector<std::string>& options, bool sm90a) {
    std::vector<std::string> opts = kernel_options(cutlass);
    opts.insert(opts.end(), options.begin(), options.end());
    auto k = ff::runtime::compile_cached(source, name, arch, opts, sm90a);
    return nb::make_tuple(k.is_cubin, k.image.size(), k.log);
  }, "source"_a, "name"_a, "arch"_a, "cutlass"_a = false, "options"_a = std::vector<std::string>{},
     "sm90a"_a = false,
     "Compiles with NVRTC (disk-cached; `options` added to the defaults; sm90a: for the arch-specific "
     "sm_90a target); returns (is_cubin, image bytes, log).");
  m.def("add_cutlass_include_dir", &ff::runtime::add_cutlass_include_dir);
  m.def("cutlass_options", &ff::runtime::cutlass_options);
  m.def("nvrtc_version", &ff::runtime::nvrtc_version);
  m.def("nvrtc_compile_count", [] { return static_cast<uint64_t>(ff::runtime::nvrtc_compile_count()); });
  m.def("clear_memory_cache", &ff::runtime::clear_memory_cache,
        "Forgets kernels compiled in this process (the disk cache stays): the next compile reads the disk cache.");
  m.def("add_library_search_dir", &ff::runtime::add_library_search_dir);
  m.def("cache_dir", &ff::runtime::cache_dir);
  m.def("driver_available", &ff::runtime::driver_available);
  m.def("device_sm_count", &ff::runtime::device_sm_count);
  m.def("device_arch", &ff::runtime::device_arch);

  nb::class_<PointwiseKernel>(m, "PointwiseKernel")
      .def(nb::init<const std::string&, const std::string&, int, int64_t, int, int, std::vector<int64_t>, int, int,
                    bool, bool>(),
           "source"_a, "name"_a, "arch"_a, "items"_a, "block"_a, "unroll"_a, "grid"_a, "block_y"_a,
           "shared_bytes"_a = 0, "cutlass"_a = false, "sm90a"_a = false)
      .def("launch", &PointwiseKernel::launch, "device"_a, "pointers"_a, "scalars"_a, "stream"_a)
      .def_prop_ro("name", &PointwiseKernel::name);
}
