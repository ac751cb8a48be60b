// The torch expression of every IR op run as a library call. One switch with
// no default: a new op in ops.def does not build (-Werror=switch) until it
// has its entry here.
#include "codegen/torch/library_call.h"

#include <algorithm>

#include "codegen/torch/python_text.h"
#include "ir/pool.h"

namespace ff::codegen {

namespace {

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

// What the expressions read off a node: its operand texts, result type,
// first operand's type and attributes, spelled as Python.
struct Form {
  const Node& n;
  const std::vector<std::string>& a;
  std::string dt;                     // the result dtype, torch.float32
  std::string shape;                  // the result shape, [2, 3]
  const TensorType* first = nullptr;  // the first operand's type (null: a literal)

  Form(const Node& node, const std::vector<std::string>& operands) : n(node), a(operands) {
    const TensorType& r = n.result()->type;
    dt = py::dtype(r.dtype);
    shape = py::ints(r.shape);
    if (!n.operands.empty() && n.operands[0].is_value()) first = &n.operands[0].value->type;
  }
  int64_t rank() const { return first ? static_cast<int64_t>(first->shape.size()) : 0; }
  std::string keep() const { return py::boolean(n.attr_bool_or("keepdim", false)); }
  // The reduced dims: none listed means all of them.
  std::vector<int64_t> dim_list() const {
    std::vector<int64_t> dims;
    if (n.has_attr("dims")) dims = n.attr_ints("dims");
    if (dims.empty())
      for (int64_t d = 0; d < rank(); ++d) dims.push_back(d);
    return dims;
  }
  std::string dims() const { return py::ints(dim_list()); }
  std::string attr_or(const std::string& key, const std::string& dflt) const {
    return n.has_attr(key) ? py::attr(n.attrs.at(key)) : dflt;
  }
  std::string call(const std::string& fn, const std::string& args) const { return fn + "(" + args + ")"; }
  // A pointwise op through a torch function, converted to the result dtype.
  std::string pointwise(const std::string& fn, const std::vector<std::string>& args) const {
    return call(fn, join(args)) + ".to(" + dt + ")";
  }
  std::string pointwise(const std::string& fn) const { return pointwise(fn, a); }
  // torch.maximum / minimum take tensors only: numbers (literals, scalar inputs) become 0-d ones.
  std::string tensor_pointwise(const std::string& fn) const {
    std::vector<std::string> args;
    for (size_t i = 0; i < a.size(); ++i) {
      const Operand& o = n.operands.at(i);
      bool tensor = o.is_value() && !o.value->type.shape.empty();
      args.push_back(tensor ? a[i] : "torch.as_tensor(" + a[i] + ")");
    }
    return pointwise(fn, args);
  }
  // A reduction: fn(x, dim=[...], keepdim=..., <extra>).
  std::string reduce(const std::string& fn, const std::string& extra = "") const {
    return call(fn, a[0] + ", dim=" + dims() + ", keepdim=" + keep() + extra);
  }
  // torch.prod takes one dim: innermost last, so earlier dims keep their index.
  std::string prod() const {
    std::vector<int64_t> dims = dim_list();
    std::sort(dims.rbegin(), dims.rend());
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) s += "torch.prod(";
    s += a[0];
    for (int64_t d : dims) s += ", dim=" + std::to_string(d) + ", keepdim=" + keep() + ", dtype=" + dt + ")";
    return s;
  }
  // softmax / log_softmax: dtype= only where the result widens the input.
  std::string softmax(const std::string& fn) const {
    std::string in_dt = first ? py::dtype(first->dtype) : "None";
    return call(fn, a[0] + ", " + std::to_string(n.attr_int("dim")) + ", dtype=" + (dt != in_dt ? dt : "None"));
  }
  // cumsum / cumprod; a reverse one on the flipped input, flipped back.
  std::string scan(const std::string& fn) const {
    const std::string d = std::to_string(n.attr_int("dim"));
    if (!n.attr_bool_or("reverse", false)) return call(fn, a[0] + ", " + d + ", dtype=" + dt);
    return call(fn, a[0] + ".flip(" + d + "), " + d + ", dtype=" + dt) + ".flip(" + d + ")";
  }
  std::string layer_norm() const {
    return call("torch.nn.functional.layer_norm", a[0] + ", " + a[0] + ".shape[" +
                                                      std::to_string(rank() - n.attr_int("ndims")) + ":], " + a[1] +
                                                      ", " + a[2] + ", " + py::attr(n.attrs.at("eps")));
  }
  std::string convolution() const {
    std::vector<int64_t> stride = n.attr_ints("stride");
    std::string bias = a.size() > 2 ? a[2] : "None";
    std::string out_pad = attr_or("output_padding", py::ints(std::vector<int64_t>(stride.size(), 0)));
    std::string args = a[0] + ", " + a[1] + ", " + bias + ", " + py::ints(stride) + ", " +
                       py::ints(n.attr_ints("padding")) + ", " + py::ints(n.attr_ints("dilation")) + ", " +
                       py::boolean(n.attr_bool_or("transposed", false)) + ", " + out_pad + ", " +
                       attr_or("groups", "1");
    // A conv whose f32 math conv_precision decided runs under that cuDNN
    // setting: _ff_convolution (runtime/library_calls.py, copied into emitted files).
    if (n.has_attr("fp32_precision"))
      return call("_ff_convolution", py::attr(n.attrs.at("fp32_precision")) + ", " + args);
    return call("torch.ops.aten.convolution.default", args);
  }
  // ATen's pooling ops, which take every parameter per dim (avg_pool1d has no divisor_override).
  std::string pool() const {
    const PoolSpec p = *pool_spec(n);
    const std::string op =
        (p.max ? "torch.ops.aten.max_pool" : "torch.ops.aten.avg_pool") + std::to_string(p.dims) + "d.default";
    std::string args = a[0] + ", " + py::ints(p.kernel) + ", " + py::ints(p.stride) + ", " + py::ints(p.padding);
    if (p.max) return call(op, args + ", " + py::ints(p.dilation) + ", " + py::boolean(p.ceil_mode));
    args += ", " + py::boolean(p.ceil_mode) + ", " + py::boolean(p.count_include_pad);
    if (p.dims > 1) args += ", " + (p.divisor_override ? std::to_string(p.divisor_override) : std::string("None"));
    return call(op, args);
  }
  std::string opaque() const {
    const std::string& target = n.attr_string("target");
    size_t dots = 0;
    for (char c : target) dots += c == '.';
    if (dots != 2 || target.front() == '.' || target.back() == '.' || target.find("..") != std::string::npos)
      throw IRError("bad opaque target '" + target + "'");
    std::string args = n.has_attr("args") ? n.attr_string("args") : "[]";
    std::string kwargs = n.has_attr("kwargs") && !n.attr_string("kwargs").empty() ? n.attr_string("kwargs") : "{}";
    const std::string call = "torch.ops." + target + "(*" + py::opaque_arguments(args, a, target) + ", **" +
                             py::opaque_arguments(kwargs, a, target) + ")";
    if (!n.has_attr("results")) return call;
    // The op returns None in places (convolution_backward's unrequested
    // gradients): the node's results are the listed places of its tuple.
    return "(lambda r: tuple(r[i] for i in " + py::ints(n.attr_ints("results")) + "))(" + call + ")";
  }
};

}  // namespace

std::string torch_expr(const Node& n, const std::vector<std::string>& operands) {
  if (operands.size() != n.operands.size())
    throw IRError(std::string(op_name(n.op)) + ": " + std::to_string(operands.size()) + " operand texts for " +
                  std::to_string(n.operands.size()) + " operands");
  const Form f(n, operands);
  const auto& a = operands;
  switch (n.op) {
    case Op::Neg:
      return f.pointwise("torch.neg");
    case Op::Abs:
      return f.pointwise("torch.abs");
    case Op::Exp:
      return f.pointwise("torch.exp");
    case Op::Log:
      return f.pointwise("torch.log");
    case Op::Log1p:
      return f.pointwise("torch.log1p");
    case Op::Expm1:
      return f.pointwise("torch.expm1");
    case Op::Sqrt:
      return f.pointwise("torch.sqrt");
    case Op::Rsqrt:
      return f.pointwise("torch.rsqrt");
    case Op::Sigmoid:
      return f.pointwise("torch.sigmoid");
    case Op::Tanh:
      return f.pointwise("torch.tanh");
    case Op::Relu:
      return f.pointwise("torch.relu");
    case Op::Gelu:
      return f.call("torch.nn.functional.gelu", a[0] + ", approximate=" + f.attr_or("approximate", "'none'"));
    case Op::Silu:
      return f.pointwise("torch.nn.functional.silu");
    case Op::Sin:
      return f.pointwise("torch.sin");
    case Op::Cos:
      return f.pointwise("torch.cos");
    case Op::Reciprocal:
      return f.pointwise("torch.reciprocal");
    case Op::Erf:
      return f.pointwise("torch.erf");
    case Op::Floor:
      return f.pointwise("torch.floor");
    case Op::Ceil:
      return f.pointwise("torch.ceil");
    case Op::Trunc:
      return f.pointwise("torch.trunc");
    case Op::Round:
      return f.pointwise("torch.round");
    case Op::Sign:
      return f.pointwise("torch.sign");
    case Op::LogicalNot:
      return f.pointwise("torch.logical_not");
    case Op::IsNan:
      return f.pointwise("torch.isnan");
    case Op::Cast:
    case Op::Copy:
      return a[0] + ".to(" + f.dt + ", copy=True)";
    case Op::RoundTf32:  // as ff_round_tf32: on the bits, NaN kept
      return "torch.where(torch.isnan(" + a[0] + "), " + a[0] + ", torch.bitwise_and(" + a[0] +
             ".view(torch.int32) + 4096, -8192).view(torch.float32))";
    case Op::Add:
      return f.pointwise("torch.add");
    case Op::Sub:
      return f.pointwise("torch.sub");
    case Op::Mul:
      return f.pointwise("torch.mul");
    case Op::Div:
      return f.pointwise("torch.div");
    case Op::Pow:
      return f.pointwise("torch.pow");
    case Op::Maximum:
      return f.tensor_pointwise("torch.maximum");
    case Op::Minimum:
      return f.tensor_pointwise("torch.minimum");
    case Op::Eq:
      return f.pointwise("torch.eq");
    case Op::Ne:
      return f.pointwise("torch.ne");
    case Op::Lt:
      return f.pointwise("torch.lt");
    case Op::Le:
      return f.pointwise("torch.le");
    case Op::Gt:
      return f.pointwise("torch.gt");
    case Op::Ge:
      return f.pointwise("torch.ge");
    case Op::LogicalAnd:
      return f.pointwise("torch.logical_and");
    case Op::LogicalOr:
      return f.pointwise("torch.logical_or");
    case Op::Remainder:
      return f.pointwise("torch.remainder");
    case Op::Fmod:
      return f.pointwise("torch.fmod");
    case Op::Where:
      return f.pointwise("torch.where");
    case Op::Full:
      return f.call("torch.full", f.shape + ", " + a[0] + ", dtype=" + f.dt + ", device=dev");

    case Op::Sum:
      return f.reduce("torch.sum", ", dtype=" + f.dt);
    case Op::Mean:
      return f.reduce("torch.mean", ", dtype=" + f.dt);
    case Op::Amax:
      return f.reduce("torch.amax");
    case Op::Amin:
      return f.reduce("torch.amin");
    case Op::Prod:
      return f.prod();
    case Op::Var:
      return f.call("torch.var", a[0] + ", dim=" + f.dims() + ", correction=" + f.attr_or("correction", "1") +
                                     ", keepdim=" + f.keep());
    case Op::Any:
      return f.reduce("torch.any");
    case Op::Logsumexp:
      return f.reduce("torch.logsumexp");
    case Op::Argmax:
      return f.call("torch.argmax", a[0] + ", dim=" + f.attr_or("dim", "None") + ", keepdim=" + f.keep());
    case Op::Argmin:
      return f.call("torch.argmin", a[0] + ", dim=" + f.attr_or("dim", "None") + ", keepdim=" + f.keep());
    case Op::Softmax:
      return f.softmax("torch.softmax");
    case Op::LogSoftmax:
      return f.softmax("torch.log_softmax");
    case Op::LayerNorm:
      return f.layer_norm();
    case Op::MaxPool:
    case Op::AvgPool:
      return f.pool();
    case Op::Cumsum:
      return f.scan("torch.cumsum");
    case Op::Cumprod:
      return f.scan("torch.cumprod");

    case Op::Mm:
      return f.call("torch.mm", join(a));
    case Op::Bmm:
      return f.call("torch.bmm", join(a));
    case Op::Addmm:
      return f.call("torch.addmm", join(a) + ", beta=" + f.attr_or("beta", "1") + ", alpha=" + f.attr_or("alpha", "1"));
    case Op::Convolution:
      return f.convolution();

    // A view when strides allow, else a copy (the IR's view rule).
    case Op::View:
      return a[0] + ".reshape(" + f.shape + ")";
    case Op::Permute:
      return a[0] + ".permute(" + py::ints(n.attr_ints("dims")) + ")";
    case Op::Expand:
      return a[0] + ".expand(" + f.shape + ")";
    case Op::Unsqueeze:
      return a[0] + ".unsqueeze(" + std::to_string(n.attr_int("dim")) + ")";
    case Op::Squeeze:
      return a[0] + ".squeeze(" + (n.has_attr("dims") ? py::tuple(n.attr_ints("dims")) : std::string()) + ")";
    case Op::Slice:
      return f.call("torch.ops.aten.slice.Tensor", a[0] + ", " + std::to_string(n.attr_int("dim")) + ", " +
                                                       f.attr_or("start", "0") + ", " + f.attr_or("end", "None") +
                                                       ", " + f.attr_or("step", "1"));
    case Op::Select:
      return a[0] + ".select(" + std::to_string(n.attr_int("dim")) + ", " + std::to_string(n.attr_int("index")) + ")";
    case Op::Cat:
      return "torch.cat([" + join(a) + "], " + std::to_string(n.attr_int("dim")) + ")";
    case Op::Flip:
      return f.call("torch.flip", a[0] + ", " + py::ints(n.attr_ints("dims")));
    case Op::Opaque:
      return f.opaque();
  }
  throw IRError("no torch expression for op '" + std::string(op_name(n.op)) + "'");
}

}  // namespace ff::codegen
