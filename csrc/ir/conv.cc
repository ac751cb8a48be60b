#include "ir/conv.h"

#include <sstream>

namespace ff {

namespace {

std::string ints(const Shape& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int64_t ConvSpec::phases() const {
  int64_t p = 1;
  if (transposed)
    for (int64_t v : stride) p *= v;
  return p;
}

bool ConvSpec::phases_packed() const {
  if (!transposed || dims != 2 || 8 % stride[1] != 0) return false;
  for (size_t d = 0; d < 2; ++d)
    if (kernel[d] % stride[d] != 0 || dilation[d] != 1) return false;
  return true;
}

ConvSpec::GridRange ConvSpec::phase_grid(size_t d) const {
  // Phase ph's pixels i have 0 <= stride i + ph - pad < output: the first
  // (phase stride - 1's) is pad / stride, the last (phase 0's) (output - 1 +
  // pad) / stride.
  const int64_t first = padding[d] / stride[d], last = (output_size[d] - 1 + padding[d]) / stride[d];
  return {first, last - first + 1};
}

int64_t ConvSpec::gemm_m() const {
  if (phases_packed()) return batch * phase_grid(0).extent * phase_grid(1).extent;
  int64_t m = batch * phases();
  for (size_t d = 0; d < output_size.size(); ++d)
    m *= transposed ? (output_size[d] + stride[d] - 1) / stride[d] : output_size[d];
  return m;
}

int64_t ConvSpec::gemm_n() const { return phases_packed() ? phases() * out_channels : out_channels; }

int64_t ConvSpec::gemm_k() const {
  int64_t k = in_channels;
  for (size_t d = 0; d < kernel.size(); ++d) k *= transposed ? (kernel[d] + stride[d] - 1) / stride[d] : kernel[d];
  return k;
}

double ConvSpec::flops() const {
  // Every input (transposed) or output (forward) element meets a kernel window
  // of the other side's channels in its group.
  const double window = static_cast<double>(numel(kernel));
  if (transposed) return 2.0 * batch * in_channels * numel(input_size) * out_per_group() * window;
  return 2.0 * batch * out_channels * numel(output_size) * in_per_group() * window;
}

double ConvSpec::input_bytes() const {
  return static_cast<double>(batch) * in_channels * numel(input_size) * dtype_size(dtype);
}
double ConvSpec::weight_bytes() const {
  return static_cast<double>(in_channels) * out_per_group() * numel(kernel) * dtype_size(dtype);
}
double ConvSpec::output_bytes() const {
  return static_cast<double>(batch) * out_channels * numel(output_size) * dtype_size(dtype);
}

std::optional<ConvSpec> conv_spec(const Node& n) {
  if (n.op != Op::Convolution || n.operands.size() < 2 || !n.operands[0].is_value() || !n.operands[1].is_value())
    return std::nullopt;
  const TensorType& x = n.input(0)->type;
  const TensorType& w = n.input(1)->type;
  const TensorType& y = n.result()->type;
  const size_t rank = x.shape.size();
  if (rank < 3 || rank > 5 || w.shape.size() != rank || y.shape.size() != rank) return std::nullopt;
  ConvSpec s;
  s.dtype = y.dtype;
  s.dims = static_cast<int>(rank - 2);
  s.transposed = n.attr_bool_or("transposed", false);
  s.groups = n.attr_int_or("groups", 1);
  s.batch = x.shape[0];
  s.in_channels = x.shape[1];
  s.out_channels = y.shape[1];
  if (s.groups < 1 || s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0) return std::nullopt;
  auto per_dim = [&](const char* key, int64_t dflt) {
    Shape v = n.has_attr(key) ? n.attr_ints(key) : Shape{};
    if (v.empty()) v.push_back(dflt);
    if (v.size() == 1) v.resize(s.dims, v[0]);
    return v;
  };
  s.stride = per_dim("stride", 1);
  s.padding = per_dim("padding", 0);
  s.dilation = per_dim("dilation", 1);
  s.output_padding = per_dim("output_padding", 0);
  if (static_cast<int>(s.stride.size()) != s.dims || static_cast<int>(s.padding.size()) != s.dims ||
      static_cast<int>(s.dilation.size()) != s.dims || static_cast<int>(s.output_padding.size()) != s.dims)
    return std::nullopt;
  s.input_size.assign(x.shape.begin() + 2, x.shape.end());
  s.output_size.assign(y.shape.begin() + 2, y.shape.end());
  s.kernel.assign(w.shape.begin() + 2, w.shape.end());
  s.has_bias = n.operands.size() > 2 && n.operands[2].is_value();
  s.tf32 = n.has_attr("fp32_precision") && n.attr_string("fp32_precision") == "tf32";
  return s;
}

std::string conv_signature(const Node& conv) {
  const TensorType& x = conv.input(0)->type;
  const TensorType& w = conv.input(1)->type;
  const auto spec = conv_spec(conv);
  if (!spec) throw IRError("conv_signature: '" + print_node(conv) + "' is not a convolution this build describes");
  std::ostringstream os;
  os << dtype_name(spec->dtype) << " x" << ints(x.shape) << ints(x.strides) << " w" << ints(w.shape) << ints(w.strides)
     << " stride=" << ints(spec->stride) << " padding=" << ints(spec->padding) << " dilation=" << ints(spec->dilation)
     << " transposed=" << (spec->transposed ? 1 : 0) << " output_padding=" << ints(spec->output_padding)
     << " groups=" << spec->groups;
  return os.str();
}

std::optional<CudnnTimes> measured_cudnn(const Node& conv) {
  if (!conv.has_attr("cudnn_contiguous_ms") || !conv.has_attr("cudnn_channels_last_ms")) return std::nullopt;
  return CudnnTimes{conv.attr_float("cudnn_contiguous_ms"), conv.attr_float("cudnn_channels_last_ms")};
}

std::optional<double> measured_direct_ms(const Node& conv) {
  if (!conv.has_attr("direct_ms")) return std::nullopt;
  return conv.attr_float("direct_ms");
}

std::string_view conv_engine_name(ConvEngine e) {
  switch (e) {
    case ConvEngine::cudnn:
      return "cudnn";
    case ConvEngine::implicit_gemm:
      return "implicit_gemm";
    case ConvEngine::direct:
      return "direct";
  }
  return "cudnn";
}

std::optional<ConvEngine> conv_engine(const Node& conv) {
  if (!conv.has_attr("engine")) return std::nullopt;
  const std::string& name = conv.attr_string("engine");
  for (ConvEngine e : {ConvEngine::cudnn, ConvEngine::implicit_gemm, ConvEngine::direct})
    if (name == conv_engine_name(e)) return e;
  throw IRError("'" + print_node(conv) + "': unknown conv engine '" + name +
                "' (expected cudnn, implicit_gemm or direct)");
}

Shape channels_last_strides(const Shape& s) {
  Shape st(s.size(), 0);
  if (s.size() < 3) return contiguous_strides(s);
  int64_t acc = 1;
  st[1] = acc;
  acc *= s[1];
  for (size_t d = s.size(); d-- > 2;) {
    st[d] = acc;
    acc *= s[d];
  }
  st[0] = acc;
  return st;
}

bool is_channels_last(const TensorType& t) {
  return t.shape.size() >= 3 && same_strides(t.shape, t.strides, channels_last_strides(t.shape));
}

}  // namespace ff
