// fuseforge._fast_call: an OptimizedModule's repeated call in C++.
//
// A call that repeats the last one's specialization is the common case, and
// for a small model its host time is the GPU's idle time: the Python path
// (guard key, gathering inputs, the prepare section's check, allocating
// outputs, launching) costs 20-130 us, more than many kernels. FastCall does
// the same work natively: it checks the arguments, parameters and buffers
// against those the specialization was armed with, checks that the prepare
// section's weights are unchanged, then walks the executor's run steps:
// kernel launches natively (outputs from torch's caching allocator, on
// torch's current stream), views natively where the executor found their
// offset and layout, every other step (library calls, kernels run
// otherwise) through the executor's own Python closure over the same slot
// list. Any mismatch returns None and the Python path decides (and, for
// this specialization, arms a new FastCall), so this file holds no policy.
//
// This module links libtorch (for tensors and streams); the core does not.
// It is built only where torch is importable at build time.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAStream.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// _core's C entry point for launching a LaunchableKernel (plan_bindings.cc):
// returns nullptr or the error message.
using LaunchEntry = const char* (*)(void* kernel, int device, const uintptr_t* pointers, size_t n_pointers,
                                    const double* scalars, size_t n_scalars, uintptr_t stream);

struct Layout {
  at::ScalarType dtype;
  std::vector<int64_t> shape, strides;

  static Layout of(const at::Tensor& t) { return {t.scalar_type(), t.sizes().vec(), t.strides().vec()}; }
  // dtype, shape and strides (as the guard key and Specialization.gather compare them).
  bool matches(const at::Tensor& t) const {
    return t.scalar_type() == dtype && t.sizes().equals(shape) && t.strides().equals(strides);
  }
  // Strides agree on every dim of size > 1 (executor._same_layout).
  bool same_layout(const at::Tensor& t) const {
    auto s = t.strides();
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] != 1 && s[i] != strides[i]) return false;
    return true;
  }
};

at::ScalarType scalar_type(py::handle dtype) {
  if (!THPDtype_Check(dtype.ptr())) throw std::invalid_argument("expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

Layout layout(py::handle dtype, py::handle shape, py::handle strides) {
  return {scalar_type(dtype), shape.cast<std::vector<int64_t>>(), strides.cast<std::vector<int64_t>>()};
}

bool is_tensor(py::handle h) { return THPVariable_Check(h.ptr()); }
const at::Tensor& tensor(py::handle h) { return THPVariable_Unpack(h.ptr()); }

// One forward argument as the guard key sees it.
struct ArgGuard {
  enum Kind { Tensor, Number, None } kind;
  Layout layout;
  c10::Device device{c10::kCPU};
  PyTypeObject* type = nullptr;  // Number: bool, int or float, exactly
};

// One plan input: a forward argument, a lifted constant, or a parameter or
// buffer looked up in its module's dict on every call (so a replaced one is seen).
struct Input {
  enum Kind { Arg, Const, State } kind;
  int slot;
  int arg = -1;
  py::object value;  // Const: the tensor; State: the module's _parameters or _buffers dict
  py::object name;   // State: the attribute name
  Layout layout;     // State: what it must still be
  c10::Device device{c10::kCPU};
};

struct KernelInput {
  int memory;
  bool relayout;
  Layout layout;
};

struct Step {
  enum Kind { Launch, View, Python, Free } kind;
  std::vector<int> slots;       // Launch: outputs; View: source, result; Free: the slots it frees
  std::vector<Layout> outputs;  // View: the source's layout, then the result's (its dtype unused)
  int64_t offset = 0;           // View: the result's storage offset from the source's
  std::vector<KernelInput> inputs;
  std::vector<int> over;       // Launch: per output, the input whose memory it may be written over (-1: none)
  std::vector<bool> replaces;  // Launch: per output, whether that input is a buffer it is the new value of
  std::vector<int> scalars;
  int64_t align = 0;
  void* kernel = nullptr;
  py::object keep;  // Launch: the LaunchableKernel (kept alive); View, Python: the closure over the slot list
};

struct Weight {
  int slot;
  py::object value;  // the weight itself: a call's must be this object
  int64_t version;
  const void* data;
};

at::Tensor copy_to(const at::Tensor& x, const Layout& t) {
  return at::empty_strided(t.shape, t.strides, x.options().dtype(t.dtype)).copy_(x);
}

class FastCall {
 public:
  // Armed from a call the Python path just ran: `args` are that call's
  // forward arguments; `inputs` per plan input (kind, slot, source);
  // `weights` the prepare section's (slot, tensor) and `kept` its (slot,
  // value); `steps` the executor's run steps (fast_call.py describes them).
  FastCall(int n_slots, bool training, py::tuple args, py::list specialized, py::list inputs, py::list weights,
           py::list kept, py::list steps, py::list outputs, py::list mutations, int device, uintptr_t launch_entry)
      : n_slots_(n_slots), training_(training), device_(device), launch_(reinterpret_cast<LaunchEntry>(launch_entry)) {
    conv_precision_ = conv_precision();
    for (py::handle a : args) {
      ArgGuard g;
      if (is_tensor(a)) {
        g.kind = ArgGuard::Tensor;
        g.layout = Layout::of(tensor(a));
        g.device = tensor(a).device();
      } else if (a.is_none()) {
        g.kind = ArgGuard::None;
      } else if (PyBool_Check(a.ptr()) || PyLong_CheckExact(a.ptr()) || PyFloat_CheckExact(a.ptr())) {
        g.kind = ArgGuard::Number;
        g.type = Py_TYPE(a.ptr());
      } else {
        throw std::invalid_argument("an argument that is not a tensor, a number or None");
      }
      args_.push_back(std::move(g));
    }
    for (py::handle s : specialized) specialized_.emplace_back(s[py::int_(0)].cast<int>(), s[py::int_(1)]);
    for (py::handle i : inputs) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(i);
      Input in;
      const std::string kind = t[0].cast<std::string>();
      in.slot = t[1].cast<int>();
      if (kind == "arg") {
        in.kind = Input::Arg;
        in.arg = t[2].cast<int>();
      } else if (kind == "const") {
        in.kind = Input::Const;
        in.value = py::reinterpret_borrow<py::object>(t[2]);
      } else {
        in.kind = Input::State;
        in.value = py::reinterpret_borrow<py::object>(t[2]);
        in.name = py::reinterpret_borrow<py::object>(t[3]);
        PyObject* v = PyDict_GetItemWithError(in.value.ptr(), in.name.ptr());
        if (v == nullptr || !is_tensor(v)) throw std::invalid_argument("a parameter or buffer that is not a tensor");
        in.layout = Layout::of(tensor(v));
        in.device = tensor(v).device();
      }
      inputs_.push_back(std::move(in));
    }
    for (py::handle w : weights) {
      py::handle obj = w[py::int_(1)];
      Weight x{w[py::int_(0)].cast<int>(), py::reinterpret_borrow<py::object>(obj), 0, nullptr};
      if (is_tensor(obj)) {
        x.version = tensor(obj)._version();
        x.data = tensor(obj).data_ptr();
      }
      weights_.push_back(std::move(x));
    }
    for (py::handle k : kept) kept_.emplace_back(k[py::int_(0)].cast<int>(), k[py::int_(1)]);
    for (py::handle s : steps) steps_.push_back(step(py::reinterpret_borrow<py::tuple>(s)));
    outputs_ = outputs.cast<std::vector<int>>();
    for (py::handle m : mutations)
      mutations_.push_back({m[py::int_(0)].cast<int>(), py::reinterpret_borrow<py::object>(m[py::int_(1)]),
                            py::reinterpret_borrow<py::object>(m[py::int_(2)])});
  }

  int64_t served() const { return served_; }

  // The outputs in plan order, or None when this call is not the armed
  // one's kind. A call with an input that requires grad under grad mode is
  // declined: it takes the training path (runtime/training.py).
  py::object call(py::handle module, py::tuple args) { return run_call(module, std::move(args), nullptr); }

  // As call, with arguments the caller hands over (a backward's saved
  // values): once they are in their slots the list is emptied, so that the
  // plan's frees release each after its last read. A declined call leaves the
  // list as it was.
  py::object call_handed_over(py::handle module, py::list args) { return run_call(module, py::tuple(args), &args); }

 private:
  py::object run_call(py::handle module, py::tuple args, py::list* handed_over) {
    if (!guard(module, args)) return py::none();
    py::list env(n_slots_);
    for (int i = 0; i < n_slots_; ++i) PyList_SET_ITEM(env.ptr(), i, py::none().release().ptr());
    const bool grad = c10::GradMode::is_enabled();
    for (const Input& in : inputs_) {
      py::handle v;
      if (in.kind == Input::Arg) {
        v = args[in.arg];
      } else if (in.kind == Input::Const) {
        v = in.value;
      } else {
        PyObject* found = PyDict_GetItemWithError(in.value.ptr(), in.name.ptr());
        if (found == nullptr) {
          if (PyErr_Occurred()) throw py::error_already_set();
          return py::none();
        }
        if (!is_tensor(found) || !in.layout.matches(tensor(found)) || tensor(found).device() != in.device)
          return py::none();
        v = found;
      }
      if (grad && is_tensor(v) && tensor(v).requires_grad()) return py::none();
      env[in.slot] = v;
    }
    for (const Weight& w : weights_) {
      py::handle v = env[w.slot];
      if (!v.is(w.value)) return py::none();
      if (is_tensor(v) && (tensor(v)._version() != w.version || tensor(v).data_ptr() != w.data)) return py::none();
    }
    for (const auto& [slot, value] : kept_) env[slot] = value;
    if (handed_over != nullptr) {
      args = py::tuple();
      if (PyList_SetSlice(handed_over->ptr(), 0, PY_SSIZE_T_MAX, nullptr) != 0) throw py::error_already_set();
    }
    {
      c10::AutoGradMode no_grad(false);
      for (const Step& s : steps_) run(s, env);
      for (const auto& [slot, dict, name] : mutations_) {
        PyObject* buffer = PyDict_GetItemWithError(dict.ptr(), name.ptr());
        if (buffer == nullptr || !is_tensor(buffer)) throw std::runtime_error("fuseforge: a mutated buffer is gone");
        tensor(buffer).copy_(tensor(env[slot]));
      }
    }
    py::list out(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) out[i] = env[outputs_[i]];
    ++served_;
    return out;
  }

  struct Mutation {
    int slot;
    py::object dict, name;
  };

  static std::array<int, 3> conv_precision() {
    auto& ctx = at::globalContext();
    using at::Float32Backend, at::Float32Op;
    return {static_cast<int>(ctx.float32Precision(Float32Backend::CUDA, Float32Op::CONV)),
            static_cast<int>(ctx.float32Precision(Float32Backend::CUDA, Float32Op::ALL)),
            static_cast<int>(ctx.float32Precision(Float32Backend::GENERIC, Float32Op::ALL))};
  }

  static Step step(py::tuple t) {
    Step s;
    const std::string kind = t[0].cast<std::string>();
    if (kind == "free") {
      s.kind = Step::Free;
      s.slots = t[1].cast<std::vector<int>>();
    } else if (kind == "python") {
      s.kind = Step::Python;
      s.keep = py::reinterpret_borrow<py::object>(t[1]);
    } else if (kind == "view") {
      // ("view", source slot, result slot, dtype, shape, strides, result shape, result strides, offset, closure)
      s.kind = Step::View;
      s.slots = {t[1].cast<int>(), t[2].cast<int>()};
      s.outputs.push_back(layout(t[3], t[4], t[5]));
      s.outputs.push_back(layout(t[3], t[6], t[7]));
      s.offset = t[8].cast<int64_t>();
      s.keep = py::reinterpret_borrow<py::object>(t[9]);
    } else {
      // ("launch", kernel, handle, [(slot, dtype, shape, strides, over, replaces)], [(memory, relayout, dtype,
      //  shape, strides)], align, [scalar slots])
      s.kind = Step::Launch;
      s.keep = py::reinterpret_borrow<py::object>(t[1]);
      s.kernel = reinterpret_cast<void*>(t[2].cast<uintptr_t>());
      for (py::handle o : t[3]) {
        s.slots.push_back(o[py::int_(0)].cast<int>());
        s.outputs.push_back(layout(o[py::int_(1)], o[py::int_(2)], o[py::int_(3)]));
        s.over.push_back(o[py::int_(4)].cast<int>());
        s.replaces.push_back(o[py::int_(5)].cast<bool>());
      }
      for (py::handle i : t[4])
        s.inputs.push_back({i[py::int_(0)].cast<int>(), i[py::int_(1)].cast<bool>(),
                            layout(i[py::int_(2)], i[py::int_(3)], i[py::int_(4)])});
      s.align = t[5].cast<int64_t>();
      s.scalars = t[6].cast<std::vector<int>>();
    }
    return s;
  }

  bool guard(py::handle module, py::tuple args) const {
    if (args.size() != args_.size()) return false;
    PyObject* training = PyObject_GetAttrString(module.ptr(), "training");
    if (training == nullptr) throw py::error_already_set();
    const bool same_mode = (training == Py_True) == training_;
    Py_DECREF(training);
    if (!same_mode || conv_precision() != conv_precision_) return false;
    for (size_t i = 0; i < args_.size(); ++i) {
      PyObject* a = args[i].ptr();
      const ArgGuard& g = args_[i];
      if (g.kind == ArgGuard::Tensor) {
        if (!is_tensor(a) || !g.layout.matches(tensor(a)) || tensor(a).device() != g.device) return false;
      } else if (g.kind == ArgGuard::None) {
        if (a != Py_None) return false;
      } else if (Py_TYPE(a) != g.type) {
        return false;
      }
    }
    for (const auto& [i, value] : specialized_) {
      py::handle a = args[i];
      if (a.equal(value)) continue;
      const bool nan = PyFloat_Check(a.ptr()) && PyFloat_Check(value.ptr()) && a.not_equal(a) && value.not_equal(value);
      if (!nan) return false;
    }
    return true;
  }

  void run(const Step& s, py::list& env) const {
    if (s.kind == Step::Free) {
      for (int slot : s.slots) env[slot] = py::none();
      return;
    }
    if (s.kind == Step::View) {
      // The view as the executor's closure makes it, without a trip through
      // Python; a source in another layout than recorded takes the closure.
      py::handle v = env[s.slots[0]];
      if (!is_tensor(v) || !s.outputs[0].matches(tensor(v))) {
        s.keep(env);
        return;
      }
      const at::Tensor& x = tensor(v);
      const Layout& r = s.outputs[1];
      env[s.slots[1]] = py::reinterpret_steal<py::object>(
          THPVariable_Wrap(x.as_strided(r.shape, r.strides, x.storage_offset() + s.offset)));
      return;
    }
    if (s.kind == Step::Python) {
      s.keep(env);
      return;
    }
    std::vector<at::Tensor> ins;  // as the kernel reads them: re-laid-out or aligned copies where needed
    ins.reserve(s.inputs.size());
    for (const KernelInput& in : s.inputs) {
      const at::Tensor& x = tensor(env[in.memory]);
      const bool copy = (in.relayout && !in.layout.same_layout(x)) ||
                        (s.align && reinterpret_cast<uintptr_t>(x.data_ptr()) % s.align);
      ins.push_back(copy ? copy_to(x, in.layout) : x);
    }
    std::vector<uintptr_t> pointers;
    pointers.reserve(s.outputs.size() + s.inputs.size());
    std::vector<at::Tensor> outs;
    outs.reserve(s.outputs.size());
    const at::TensorOptions on_device = at::TensorOptions().device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_));
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      // Written over a dying input where no other tensor shares its memory
      // (a view of it, or one the caller kept), or into the buffer it is
      // the new value of (which the module holds). The kernel reads a
      // reshape of that memory, whose shape the output has: the memory's
      // own shape (a GEMM's 2-D result under a 3-D view) must not pass on.
      const int j = s.over[i];
      const bool over = j >= 0 && (s.replaces[i] || ins[j].storage().use_count() == 1);
      const Layout& t = s.outputs[i];
      if (!over)
        outs.push_back(at::empty_strided(t.shape, t.strides, on_device.dtype(t.dtype)));
      else if (ins[j].sizes().equals(t.shape))
        outs.push_back(ins[j]);
      else
        outs.push_back(ins[j].as_strided(t.shape, t.strides));
      pointers.push_back(reinterpret_cast<uintptr_t>(outs.back().data_ptr()));
    }
    for (const at::Tensor& x : ins) pointers.push_back(reinterpret_cast<uintptr_t>(x.data_ptr()));
    std::vector<double> scalars;
    for (int slot : s.scalars) {
      py::handle v = env[slot];
      scalars.push_back(is_tensor(v) ? tensor(v).item<double>() : v.cast<double>());
    }
    const uintptr_t stream =
        reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream());
    if (const char* error =
            launch_(s.kernel, device_, pointers.data(), pointers.size(), scalars.data(), scalars.size(), stream))
      throw std::runtime_error(error);
    for (size_t i = 0; i < outs.size(); ++i)
      env[s.slots[i]] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(outs[i])));
  }

  int64_t served_ = 0;  // calls run here (tests check that they are)
  int n_slots_;
  bool training_;
  int device_;
  LaunchEntry launch_;
  std::array<int, 3> conv_precision_;  // cuDNN conv, CUDA and generic fp32 precision, as armed
  std::vector<ArgGuard> args_;
  std::vector<std::pair<int, py::object>> specialized_;
  std::vector<Input> inputs_;
  std::vector<Weight> weights_;
  std::vector<std::pair<int, py::object>> kept_;
  std::vector<Step> steps_;
  std::vector<int> outputs_;
  std::vector<Mutation> mutations_;
};

}  // namespace

PYBIND11_MODULE(_fast_call, m) {
  m.doc() = "An OptimizedModule's repeated call in C++ (runtime/fast_call.py arms it).";
  py::class_<FastCall>(m, "FastCall")
      .def(py::init<int, bool, py::tuple, py::list, py::list, py::list, py::list, py::list, py::list, py::list, int,
                    uintptr_t>())
      .def("__call__", &FastCall::call, py::arg("module"), py::arg("args"))
      .def("call_handed_over", &FastCall::call_handed_over, py::arg("module"), py::arg("args"),
           "As __call__, emptying `args` (a list) once its tensors are in their slots.")
      .def_property_readonly("served", &FastCall::served, "how many calls ran here");
}
