// Python classes for the compile result and its plan (plan.h), and the
// launchable form of a plan's kernels. The plan's lists are bound as opaque
// vectors whose items reference the plan (and keep it alive), so Python walks
// the very objects C++ built.
#include "python/plan_bindings.h"

#include <nanobind/stl/array.h>
#include <nanobind/stl/bind_vector.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <unordered_map>
#include <variant>

#include "codegen/torch/library_call.h"
#include "fusion/subgraph.h"
#include "pipeline/compile.h"
#include "runtime/cache.h"
#include "runtime/check.h"
#include "runtime/compile_workers.h"
#include "runtime/compiler.h"
#include "runtime/env.h"
#include "runtime/launcher.h"

NB_MAKE_OPAQUE(std::vector<ff::plan::Buffer>)
NB_MAKE_OPAQUE(std::vector<ff::plan::Kernel>)
NB_MAKE_OPAQUE(std::vector<ff::plan::Step>)
NB_MAKE_OPAQUE(std::vector<ff::plan::Arg>)
NB_MAKE_OPAQUE(std::vector<ff::plan::KernelInput>)
NB_MAKE_OPAQUE(std::vector<ff::plan::Kernel::Variant>)

namespace nb = nanobind;
using namespace nb::literals;

namespace ff::python {

namespace {

using plan::Arg;
using plan::Buffer;
using plan::Kernel;
using plan::KernelInput;
using plan::Plan;
using plan::Step;

nb::object scalar_to_py(const Scalar& s) {
  switch (s.kind) {
    case Scalar::Kind::Float:
      return nb::cast(s.f);
    case Scalar::Kind::Int:
      return nb::cast(s.i);
    case Scalar::Kind::Bool:
      return nb::cast(s.i != 0);
  }
  return nb::none();
}

nb::object attr_to_py(const AttrValue& a) {
  return std::visit([](const auto& v) { return nb::cast(v); }, a);
}

nb::dict attrs_of(const Step& s) {
  nb::dict d;
  if (s.node != nullptr)
    for (const auto& [k, v] : s.node->attrs) d[k.c_str()] = attr_to_py(v);
  return d;
}

// A kernel compiled for one GPU architecture, bound to its launch geometry.
class LaunchableKernel {
 public:
  // `name`: the plan kernel's; `k` may be shared with the kernels of the same
  // code (an unrolled loop's steps load one image, not one copy each).
  // `constants`: the kernel's own (Kernel::constants), passed after the scalars.
  LaunchableKernel(std::string name, std::shared_ptr<runtime::LoadedKernel> k, std::array<int64_t, 3> grid,
                   std::array<int64_t, 3> block, int shared, std::vector<int64_t> constants)
      : name_(std::move(name)),
        kernel_(std::move(k)),
        grid_{static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2])},
        block_{static_cast<unsigned>(block[0]), static_cast<unsigned>(block[1]), static_cast<unsigned>(block[2])},
        shared_(static_cast<unsigned>(shared)),
        constants_(constants.begin(), constants.end()) {}

  // Parameters in the kernel's order: a device pointer per output and per
  // input, a double per scalar, then its constants; on `stream` (a CUstream handle).
  void launch(int device, const uintptr_t* pointers, size_t n_pointers, const double* scalars, size_t n_scalars,
              uintptr_t stream) {
    if (grid_.x == 0 || grid_.y == 0 || grid_.z == 0) return;  // empty tensors
    std::vector<void*> args;
    args.reserve(n_pointers + n_scalars + constants_.size());
    for (size_t i = 0; i < n_pointers; ++i) args.push_back(const_cast<uintptr_t*>(pointers + i));
    for (size_t i = 0; i < n_scalars; ++i) args.push_back(const_cast<double*>(scalars + i));
    for (long long& c : constants_) args.push_back(&c);
    kernel_->launch(device, grid_, block_, shared_, args.data(), stream);
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<runtime::LoadedKernel> kernel_;
  runtime::Dim3 grid_, block_;
  unsigned shared_;
  std::vector<long long> constants_;
};

// LaunchableKernel::launch for callers outside this extension
// (fuseforge._fast_call, which links libtorch): plain C types, and the error
// message (valid until the thread's next failed launch) instead of an exception.
const char* launch_entry(void* kernel, int device, const uintptr_t* pointers, size_t n_pointers, const double* scalars,
                         size_t n_scalars, uintptr_t stream) {
  static thread_local std::string error;
  try {
    static_cast<LaunchableKernel*>(kernel)->launch(device, pointers, n_pointers, scalars, n_scalars, stream);
    return nullptr;
  } catch (const std::exception& e) {
    error = e.what();
    return error.c_str();
  }
}

runtime::CompiledKernel compile(const std::string& source, const std::string& name, int arch, bool cutlass, bool sm90a,
                                bool in_worker = false) {
  return runtime::compile_cached(source, name, arch, kernel_options(cutlass), sm90a, in_worker);
}

// Compiles every kernel for `arch`, each distinct one once (Kernel::compile_key:
// an unrolled loop's steps share their kernels' code), as many at a time as
// the machine has cores (or FUSEFORGE_COMPILE_JOBS says), each in a worker
// process (NVRTC serializes a process's compiles; all of a plan's at once
// would hold hundreds of compiles' memory). A kernel that does not compile
// gets its error message instead. Kernels of the same code share one
// LoadedKernel: one image, loaded once per context.
std::vector<nb::object> load_kernels(const std::vector<Kernel>& kernels, int arch) {
  std::vector<size_t> first(kernels.size());  // the kernel whose compile each one takes
  std::vector<size_t> distinct;
  {
    std::unordered_map<std::string, size_t> by_key;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const auto [it, added] = by_key.try_emplace(kernels[i].compile_key(), i);
      first[i] = it->second;
      if (added) distinct.push_back(i);
    }
  }
  std::vector<std::shared_ptr<runtime::LoadedKernel>> compiled(kernels.size());
  std::vector<std::string> errors(kernels.size());
  const int jobs = runtime::env::compile_jobs();
  {
    nb::gil_scoped_release release;
    const size_t threads = std::min<size_t>(
        distinct.size(), jobs > 0 ? static_cast<unsigned>(jobs) : std::max(1u, std::thread::hardware_concurrency()));
    std::atomic<size_t> next{0};
    std::atomic<bool> interrupted{false};  // Ctrl-C: the kernels not compiled yet are left so
    auto work = [&] {
      for (size_t j = next++; j < distinct.size(); j = next++) {
        const Kernel& k = kernels[distinct[j]];
        if (interrupted) {
          errors[distinct[j]] = runtime::CompileInterrupted(k.name).what();
          continue;
        }
        try {
          compiled[distinct[j]] = std::make_shared<runtime::LoadedKernel>(
              compile(k.translation_unit(), k.name, arch, k.cutlass, k.sm90a, threads > 1));
        } catch (const runtime::CompileInterrupted& e) {
          interrupted = true;
          errors[distinct[j]] = e.what();
        } catch (const std::exception& e) {
          errors[distinct[j]] = e.what();
        }
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }
  std::vector<nb::object> out;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!errors[first[i]].empty()) {
      out.push_back(nb::str(errors[first[i]].c_str()));
      continue;
    }
    out.push_back(nb::cast(new LaunchableKernel(kernels[i].name, compiled[first[i]], kernels[i].grid, kernels[i].block,
                                                kernels[i].shared_bytes, kernels[i].constants),
                           nb::rv_policy::take_ownership));
  }
  return out;
}

// A pointwise kernel's graph over `n` sampled elements: every tensor becomes
// rank-1 [n] (scalar inputs stay 0-d), so the reference interpreter can check
// a sample of a group too large to interpret whole (each element of a
// pointwise group is computed independently).
std::string sampled_graph(const Kernel& k, int64_t n) {
  if (k.kind != fusion::Group::Kind::Pointwise)
    throw std::invalid_argument("only pointwise kernels can be checked on sampled elements, not " +
                                std::string(fusion::group_kind_name(k.kind)) + " kernel " + k.name);
  auto g = parse(k.graph);
  Graph s;
  s.name = g->name;
  std::unordered_map<const Value*, Value*> map;
  auto sampled = [&](const TensorType& t) { return TensorType::contiguous(t.dtype, {n}); };
  for (const Value* v : g->inputs())
    map[v] = s.add_input(v->name, v->input_kind == InputKind::Scalar ? v->type : sampled(v->type), v->input_kind);
  for (const auto& node : g->nodes()) {
    std::vector<Operand> ops;
    for (const Operand& o : node->operands) ops.push_back(o.is_value() ? Operand::of(map.at(o.value)) : o);
    map[node->result()] =
        s.add_node(node->op, std::move(ops), {sampled(node->result()->type)}, node->attrs, {node->result()->name})
            ->result();
  }
  for (const Value* o : g->outputs()) s.add_output(map.at(o));
  return print(s, /*keep_names=*/true);
}

}  // namespace

std::vector<std::string> kernel_options(bool cutlass) {
  if (!cutlass) return {};
  if (!runtime::cutlass_available())
    throw runtime::CudaError(
        "fuseforge: a GEMM kernel needs CUTLASS's headers, and none were found "
        "(pip install nvidia-cutlass==4.2.0.0)");
  return runtime::cutlass_options();
}

void bind_plan(nb::module_& m) {
  // Elements (indexed or iterated) keep their list, and so the plan, alive.
  constexpr auto kKeep = nb::rv_policy::reference_internal;
  nb::bind_vector<std::vector<Buffer>, kKeep>(m, "BufferList");
  nb::bind_vector<std::vector<Kernel>, kKeep>(m, "KernelList");
  nb::bind_vector<std::vector<Step>, kKeep>(m, "StepList");
  nb::bind_vector<std::vector<Arg>, kKeep>(m, "ArgList");
  nb::bind_vector<std::vector<KernelInput>, kKeep>(m, "KernelInputList");
  nb::bind_vector<std::vector<Kernel::Variant>, kKeep>(m, "VariantList");

  nb::class_<Buffer>(m, "Buffer", "A tensor or scalar the plan reads or writes (plan.h).")
      .def_ro("name", &Buffer::name)
      .def_prop_ro("dtype", [](const Buffer& b) { return std::string(dtype_name(b.type.dtype)); })
      .def_prop_ro("shape", [](const Buffer& b) { return b.type.shape; })
      .def_prop_ro("strides", [](const Buffer& b) { return b.type.strides; })
      .def_prop_ro(
          "role", [](const Buffer& b) { return std::string(plan::role_name(b.role)); },
          "input, param, state, const, scalar, temp, output, prepared, alias or interior")
      .def_ro("alias_of", &Buffer::alias_of, "alias: the buffer whose memory it views; else -1")
      .def_ro("donated", &Buffer::donated, "input: the caller hands it over to be written over after its last read")
      .def("__repr__", [](const Buffer& b) {
        return "<Buffer %" + b.name + ": " + format_type(b.type) + " " + std::string(plan::role_name(b.role)) + ">";
      });

  nb::class_<Arg>(m, "Arg", "A step operand: a buffer index, or a literal when buffer is -1.")
      .def_ro("buffer", &Arg::buffer)
      .def_prop_ro("literal", [](const Arg& a) { return a.is_buffer() ? nb::none() : scalar_to_py(a.literal); });

  nb::class_<KernelInput>(m, "KernelInput",
                          "A tensor a kernel reads: `buffer` as its parameter names it, `memory` the buffer "
                          "whose memory it reads (an alias's target), `relayout`: check the memory's strides "
                          "and copy it into the recorded layout where they differ.")
      .def_ro("buffer", &KernelInput::buffer)
      .def_ro("memory", &KernelInput::memory)
      .def_ro("relayout", &KernelInput::relayout);

  nb::class_<Kernel::Variant>(m, "KernelVariant", "Another candidate of a kernel (autotuning), same parameters.")
      .def_ro("name", &Kernel::Variant::name)
      .def_ro("translation_unit", &Kernel::Variant::translation_unit)
      .def_ro("grid", &Kernel::Variant::grid)
      .def_ro("block", &Kernel::Variant::block)
      .def_ro("shared_bytes", &Kernel::Variant::shared_bytes)
      .def_ro("cutlass", &Kernel::Variant::cutlass)
      .def_ro("sm90a", &Kernel::Variant::sm90a)
      .def_ro("constants", &Kernel::Variant::constants);

  nb::class_<Kernel>(m, "Kernel", "A generated kernel with its launch geometry and parameters.")
      .def_ro("name", &Kernel::name)
      .def_ro("includes", &Kernel::includes, "its #include lines")
      .def_ro("source", &Kernel::source, "its code after the #include lines")
      .def_prop_ro("translation_unit", &Kernel::translation_unit, "what NVRTC compiles: the includes, then the source")
      .def_prop_ro("compile_key", &Kernel::compile_key,
                   "what it compiles to, less its name and comments: equal keys compile once")
      .def_prop_ro("kind", [](const Kernel& k) { return std::string(fusion::group_kind_name(k.kind)); })
      .def_ro("grid", &Kernel::grid)
      .def_ro("block", &Kernel::block)
      .def_ro("shared_bytes", &Kernel::shared_bytes)
      .def_ro("vector_width", &Kernel::vector_width)
      .def_ro("cutlass", &Kernel::cutlass)
      .def_ro("sm90a", &Kernel::sm90a)
      .def_ro("align_bytes", &Kernel::align_bytes)
      .def_ro("outputs", &Kernel::outputs)
      .def_prop_ro(
          "over", [](const Kernel& k) { return k.over.empty() ? std::vector<int>(k.outputs.size(), -1) : k.over; },
          "per output: the input (index into inputs) whose memory it is written over, or -1")
      .def_ro("inputs", &Kernel::inputs, nb::rv_policy::reference_internal)
      .def_ro("scalars", &Kernel::scalars)
      .def_ro("constants", &Kernel::constants, "passed after the scalars, a long long each (a GEMM's sizes)")
      .def_ro("variants", &Kernel::variants, nb::rv_policy::reference_internal)
      .def_ro("graph", &Kernel::graph, "the group's nodes as a standalone IR graph")
      .def_ro("graph_inputs", &Kernel::graph_inputs, "the buffers `graph` takes, in its parameter order")
      .def_ro("nodes", &Kernel::nodes, nb::rv_policy::reference_internal,
              "the group's nodes as call/view steps over the plan's buffers (to run it op by op)")
      .def_ro("library_steps", &Kernel::library_steps, nb::rv_policy::reference_internal,
              "a conv kernel with an epilogue: its library form (the conv's library call, the launch of the "
              "epilogue's own kernel, the free of the conv's result); empty for other kernels")
      .def("sampled_graph", &sampled_graph, "n"_a,
           "The graph over n sampled elements (pointwise kernels only; ValueError otherwise).");

  nb::class_<Step>(m, "Step", "One step of a plan section: launch, call, view or free.")
      .def_prop_ro("kind", [](const Step& s) { return std::string(plan::step_kind_name(s.kind)); })
      .def_ro("kernel", &Step::kernel, "launch: the kernel's index")
      .def_prop_ro("op", [](const Step& s) { return s.node ? std::string(op_name(s.node->op)) : std::string(); })
      .def_prop_ro("attrs", &attrs_of)
      .def_ro("operands", &Step::operands, nb::rv_policy::reference_internal)
      .def_ro("results", &Step::results, "call/view: result buffers; free: the buffers freed")
      .def_prop_ro(
          "node_text", [](const Step& s) { return s.node ? print_node(*s.node) : std::string(); },
          "call/view: the IR node line")
      .def(
          "torch_expr",
          [](const Step& s, const std::vector<std::string>& operand_texts) {
            if (!s.node) throw IRError("a " + std::string(plan::step_kind_name(s.kind)) + " step has no torch form");
            return codegen::torch_expr(*s.node, operand_texts);
          },
          "operand_texts"_a,
          "call/view: Python source of the torch expression computing the step (codegen/torch/library_call.h) "
          "over `operand_texts`, the source of each operand; `dev` names the device.");

  nb::class_<Plan>(m, "Plan", "The typed kernel plan (plan.h); str() is its text form.")
      .def_ro("name", &Plan::name)
      .def_ro("buffers", &Plan::buffers, nb::rv_policy::reference_internal)
      .def_ro("kernels", &Plan::kernels, nb::rv_policy::reference_internal)
      .def_ro("inputs", &Plan::inputs)
      .def_ro("outputs", &Plan::outputs)
      .def_prop_ro(
          "mutations",
          [](const Plan& p) {
            std::vector<std::pair<int, int>> out;
            for (const auto& mu : p.mutations) out.emplace_back(mu.buffer, mu.value);
            return out;
          },
          "(module buffer, new value) pairs written back after the outputs")
      .def_ro("prepare", &Plan::prepare, nb::rv_policy::reference_internal)
      .def_ro("prepare_reads", &Plan::prepare_reads, "the parameters, module buffers and constants prepare reads")
      .def_ro("prepare_keeps", &Plan::prepare_keeps, "the prepared values run reads (kept between calls)")
      .def_ro("run", &Plan::run, nb::rv_policy::reference_internal)
      .def(
          "step_text", [](const Plan& p, const Step& s) { return plan::print_step(p, s); }, "step"_a)
      .def("__str__", [](const Plan& p) { return plan::print(p); });

  nb::class_<CompiledGraph>(m, "Compiled", "A compile's diagnostics and its plan.")
      .def_ro("ir_before", &CompiledGraph::ir_before)
      .def_ro("ir_after", &CompiledGraph::ir_after)
      .def_ro("pass_trace", &CompiledGraph::pass_trace)
      .def_ro("phase_seconds", &CompiledGraph::phase_seconds,
              "(stage, wall seconds) in order: parse, passes, fusion, codegen, plan")
      .def_ro("plan", &CompiledGraph::plan, nb::rv_policy::reference_internal);

  nb::class_<LaunchableKernel>(m, "LaunchableKernel")
      .def(
          "launch",
          [](LaunchableKernel& k, int device, const std::vector<uintptr_t>& pointers,
             const std::vector<double>& scalars, uintptr_t stream) {
            k.launch(device, pointers.data(), pointers.size(), scalars.data(), scalars.size(), stream);
          },
          "device"_a, "pointers"_a, "scalars"_a, "stream"_a)
      .def_prop_ro("name", &LaunchableKernel::name)
      .def_prop_ro(
          "handle", [](LaunchableKernel& k) { return reinterpret_cast<uintptr_t>(&k); },
          "its address, for launch_entry");
  m.attr("launch_entry") = reinterpret_cast<uintptr_t>(&launch_entry);

  m.def("load_kernels", &load_kernels, "kernels"_a, "arch"_a,
        "Compiles the kernels for compute capability `arch` in parallel, each distinct one once (NVRTC, "
        "disk-cached); per kernel a LaunchableKernel, or the error message of a kernel that did not compile.");
  m.def(
      "load_variant",
      [](const Kernel::Variant& v, int arch) {
        return new LaunchableKernel(
            v.name,
            std::make_shared<runtime::LoadedKernel>(compile(v.translation_unit, v.name, arch, v.cutlass, v.sm90a)),
            v.grid, v.block, v.shared_bytes, v.constants);
      },
      "variant"_a, "arch"_a, "A kernel's autotuning candidate, compiled for `arch`.");
}

}  // namespace ff::python
