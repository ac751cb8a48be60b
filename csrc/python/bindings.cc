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
#include "ir/target.h"
#include "kernel/conv.h"
#include "kernel/conv_cost.h"
#include "passes/pass.h"
#include "pipeline/compile.h"
#include "python/op_bindings.h"
#include "python/plan_bindings.h"
#include "runtime/cache.h"
#include "runtime/check.h"
#include "runtime/compile_workers.h"
#include "runtime/compiler.h"
#include "runtime/cuda_libs.h"
#include "runtime/launcher.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::tuple type_tuple(const ff::TensorType& t) {
  return nb::make_tuple(std::string(ff::dtype_name(t.dtype)), nb::cast(t.shape), nb::cast(t.strides));
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
    // The cost model's milliseconds per engine (the default target's rates,
    // nothing timed; None where an engine cannot run the conv): the probe
    // times the direct kernel where it comes close to cuDNN's, and
    // tools/conv_probe.py sets them beside timed figures.
    const bool kernel = ff::fusion::conv_kernel_covers(*spec), direct = ff::fusion::direct_conv_covers(*spec);
    const ff::fusion::ConvTimes t = ff::fusion::conv_times(*spec, ff::default_target(), kernel, direct);
    nb::dict model;
    model["cudnn_contiguous"] = t.cudnn_nchw;
    model["cudnn_channels_last"] = t.cudnn_channels_last;
    model["kernel"] = kernel ? nb::cast(t.kernel) : nb::none();
    model["direct"] = direct ? nb::cast(t.direct) : nb::none();
    d["model_ms"] = model;
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

// Options of a compile: `gemm` is a GemmPolicy name (compile.h); matmuls
// become GEMM kernels only where CUTLASS's headers were found.
// The conv kernel policy (compile.h's set_conv_policy); no implicit-GEMM kernels without CUTLASS's headers.
void set_conv_policy(ff::CompileOptions& opts, const std::string& policy) {
  ff::set_conv_policy(opts, policy);  // throws for an unknown name, with or without CUTLASS
  if (!ff::runtime::cutlass_available()) {
    opts.conv_dtypes.clear();
    opts.conv_always = false;
  }
}

ff::CompileOptions make_options(const std::string& precision, const std::string& gemm, bool autotune, int arch,
                                const std::vector<std::string>& passes, bool trace, bool reductions) {
  ff::CompileOptions o;
  o.precision = ff::parse_precision(precision);
  o.gemm_dtypes = ff::runtime::cutlass_available() ? ff::gemm_dtypes(ff::parse_gemm_policy(gemm), o.precision)
                                                   : std::vector<ff::DType>{};
  o.autotune = autotune;
  o.arch = arch;
  o.passes = passes;
  o.trace_passes = trace;
  o.reductions = reductions;
  return o;
}

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

  ff::python::bind_op_registry(m);

  m.def(
      "normalize_ir",
      [](const std::string& text) {
        auto g = ff::parse(text);
        ff::verify(*g);
        return ff::print(*g);
      },
      "text"_a, "Parses, verifies and prints IR text (raises ValueError on bad IR).");
  m.def(
      "run_passes",
      [](const std::string& text, const std::vector<std::string>& passes) {
        auto g = ff::parse(text);
        ff::verify(*g);
        ff::passes::PassManager(passes).run(*g);
        return ff::print(*g);
      },
      "text"_a, "passes"_a);
  m.def("pass_names", &ff::passes::pass_names);
  m.def("default_pipeline", &ff::passes::default_pipeline);
  m.def("interpret", &interpret, "text"_a, "inputs"_a,
        "Runs IR on the CPU reference interpreter; inputs and outputs are float64 numpy arrays.");
  m.attr("PRECISIONS") = ff::precision_names();
  nb::class_<ff::Target>(m, "Target", "The GPU a compile is for: its hardware facts (ir/target.h); str() is one line.")
      .def(nb::init<>(), "default_target()'s facts.")
      .def(
          "__init__",
          [](ff::Target* t, int arch, int sm_count, int64_t shared_per_block_optin, int64_t shared_per_sm,
             int64_t l2_bytes) {
            if (arch < 0 || sm_count <= 0 || shared_per_block_optin <= 0 || shared_per_sm <= 0 || l2_bytes < 0)
              throw std::invalid_argument("Target: sm_count and shared memory sizes must be positive");
            new (t) ff::Target{arch, sm_count, shared_per_block_optin, shared_per_sm, l2_bytes};
          },
          "arch"_a, "sm_count"_a, "shared_per_block_optin"_a, "shared_per_sm"_a, "l2_bytes"_a,
          "arch: compute capability; sm_count: multiprocessors; shared_per_block_optin: bytes of shared memory a "
          "block may opt in to; shared_per_sm: bytes an SM has; l2_bytes: L2 cache bytes.")
      .def_ro("arch", &ff::Target::arch)
      .def_ro("sm_count", &ff::Target::sm_count)
      .def_ro("shared_per_block_optin", &ff::Target::shared_per_block_optin)
      .def_ro("shared_per_sm", &ff::Target::shared_per_sm)
      .def_ro("l2_bytes", &ff::Target::l2_bytes)
      .def_prop_ro("name", &ff::Target::name)
      .def("__str__", &ff::Target::text);
  m.def("default_target", &ff::default_target, "The target without a GPU: an H100/H200 (sm90-132sm).");
  m.def("target_for_arch", &ff::target_for_arch, "arch"_a,
        "The facts of the usual part of a compute capability (default_target()'s for 90 and unknown ones).");
  nb::class_<ff::CompileOptions>(m, "CompileOptions", "How to compile (pipeline/compile.h).")
      .def(
          "__init__",
          [](ff::CompileOptions* o, const std::string& precision, const std::string& gemm, bool autotune, int arch,
             const std::vector<std::string>& passes, bool trace, bool reductions, const std::string& conv,
             const std::map<std::string, bool>& conv_tf32, const std::map<std::string, bool>& conv_channels_last,
             const std::map<std::string, std::pair<double, double>>& conv_cudnn_ms,
             const std::map<std::string, double>& conv_direct_ms, const std::optional<ff::Target>& target,
             bool release_inputs, const std::vector<std::string>& donated) {
            new (o) ff::CompileOptions(make_options(precision, gemm, autotune, arch, passes, trace, reductions));
            o->target = target;
            set_conv_policy(*o, conv);
            o->eager_conv_tf32 = conv_tf32;
            o->conv_channels_last = conv_channels_last;
            for (const auto& [sig, ms] : conv_cudnn_ms) o->conv_cudnn[sig] = ff::CudnnTimes{ms.first, ms.second};
            o->conv_direct_ms = conv_direct_ms;
            o->release_inputs = release_inputs;
            o->donated = donated;
          },
          "precision"_a = "fp32", "gemm"_a = "auto", "autotune"_a = false, "arch"_a = 0,
          "passes"_a = std::vector<std::string>{}, "trace"_a = false, "reductions"_a = true, "conv"_a = "direct",
          "conv_tf32"_a = std::map<std::string, bool>{}, "conv_channels_last"_a = std::map<std::string, bool>{},
          "conv_cudnn_ms"_a = std::map<std::string, std::pair<double, double>>{},
          "conv_direct_ms"_a = std::map<std::string, double>{}, "target"_a = nb::none(), "release_inputs"_a = false,
          "donated"_a = std::vector<std::string>{},
          "precision: one of PRECISIONS. gemm: which matmuls become generated GEMM kernels: auto (f32 at the fp32 "
          "precision), all (f32, f16, bf16) or off; none where CUTLASS's headers are missing. autotune: list every "
          "GEMM and conv kernel's other candidates (timed at its first run). arch: the target GPU's compute "
          "capability (90: Hopper kernels; 0: unknown). passes: empty for the default pipeline. trace: record the IR "
          "after each pass. reductions: reductions, norms and softmax as generated kernels (else library calls). "
          "conv: direct (2-D f32 convs may become generated direct kernels where the cost model prefers them to "
          "cuDNN), auto (also implicit-GEMM kernels where the cost model puts them ahead of cuDNN as timed, "
          "conv_cudnn_ms; none where CUTLASS's headers are missing), always (every conv "
          "an implicit-GEMM kernel covers) or off. conv_tf32: per "
          "conv signature (see convolutions()), whether eager's conv uses TF32 (else the fp32 policy keeps it "
          "IEEE); conv_channels_last: per signature, whether it timed faster channels-last; conv_cudnn_ms: per "
          "signature, cuDNN's (contiguous, channels-last) milliseconds as timed (the cost model's figures otherwise); "
          "conv_direct_ms: per signature, the direct kernel's milliseconds as timed. target: the GPU's facts (a "
          "Target); None: target_for_arch(arch). release_inputs: the caller hands its input tensors over; the plan "
          "frees each after its last read. donated: the inputs (by name) it may also write over then.")
      .def_prop_ro("precision",
                   [](const ff::CompileOptions& o) { return std::string(ff::precision_name(o.precision)); })
      .def_prop_ro("gemm_dtypes",
                   [](const ff::CompileOptions& o) {
                     std::vector<std::string> out;
                     for (ff::DType d : o.gemm_dtypes) out.emplace_back(ff::dtype_name(d));
                     return out;
                   })
      .def_ro("autotune", &ff::CompileOptions::autotune)
      .def_ro("reductions", &ff::CompileOptions::reductions)
      .def_ro("release_inputs", &ff::CompileOptions::release_inputs)
      .def_ro("donated", &ff::CompileOptions::donated)
      .def_ro("arch", &ff::CompileOptions::arch)
      .def_prop_ro(
          "target", [](const ff::CompileOptions& o) { return ff::compile_target(o); },
          "The facts the compile is for: the target given, else target_for_arch(arch).");
  ff::python::bind_plan(m);
  m.def(
      "compile",
      [](const std::string& text, const ff::CompileOptions& options) { return ff::compile_graph(text, options); },
      "text"_a, "options"_a, "Compiles IR text: passes, fusion, CUDA generation and the plan (a Compiled).");
  m.def("convolutions", &convolutions, "text"_a,
        "The graph's convolutions: signature, dtype, input/weight types, parameters, fp32_precision, "
        "whether the result is channels-last, and model_ms, the cost model's milliseconds per engine "
        "(cudnn_contiguous, cudnn_channels_last, kernel, direct; None where one cannot run it) "
        "(for the precision probe and diagnostics).");

  m.def(
      "nvrtc_compile",
      [](const std::string& source, const std::string& name, int arch, bool cutlass,
         const std::vector<std::string>& options, bool sm90a) {
        std::vector<std::string> opts = ff::python::kernel_options(cutlass);
        opts.insert(opts.end(), options.begin(), options.end());
        auto k = ff::runtime::compile_cached(source, name, arch, opts, sm90a);
        return nb::make_tuple(k.is_cubin, k.image.size(), k.log);
      },
      "source"_a, "name"_a, "arch"_a, "cutlass"_a = false, "options"_a = std::vector<std::string>{}, "sm90a"_a = false,
      "Compiles with NVRTC (disk-cached; `options` added to the defaults; sm90a: for the arch-specific "
      "sm_90a target); returns (is_cubin, image bytes, log).");
  m.def("add_cutlass_include_dir", &ff::runtime::add_cutlass_include_dir);
  m.def("set_compile_worker", &ff::runtime::set_compile_worker,
        "The fuseforge-nvrtc executable kernels compiled together compile in, each in a process of its own "
        "(NVRTC serializes one process's compiles); \"\" compiles them in this process.");
  m.def("compile_worker", &ff::runtime::compile_worker, "The registered fuseforge-nvrtc executable; \"\" if none.");
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
}
