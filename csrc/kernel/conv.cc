#include "kernel/conv.h"

#include <utility>

#include "kernel/direct_conv_tile.h"

namespace ff::fusion {

namespace {

// Elements per vector access: the largest power of two up to 16 bytes that
// divides the input channels; 0 where no form of the kernel loads them (below
// cp.async's 4 bytes, or 3-D convs, whose CUTLASS iterators load 16 bytes).
int alignment_of(const ConvSpec& s) {
  const int element = dtype_size(s.dtype);
  int a = 16 / element;
  while (a > 1 && s.in_channels % a != 0) a /= 2;
  if (a * element < 4 || (s.dims == 3 && a * element != 16)) return 0;
  return a;
}

}  // namespace

Shape conv_kernel_weight_strides(const ConvSpec& s, const Shape& w) {
  if (!s.transposed) return channels_last_strides(w);
  // [in, out, window...] laid out as the channels-last [out, in, window...].
  Shape swapped = w;
  std::swap(swapped[0], swapped[1]);
  Shape strides = channels_last_strides(swapped);
  std::swap(strides[0], strides[1]);
  return strides;
}

bool conv_kernel_covers(const ConvSpec& s) {
  if (s.groups != 1 || (s.dims != 2 && s.dims != 3)) return false;
  // Transposed: 2-D, undilated, 1xTF32 (the Hopper kernel on rounded operands, its only form).
  if (s.transposed &&
      (s.dims != 2 || s.dtype != DType::f32 || !s.tf32 || s.dilation != Shape(2, 1) || s.in_channels % 4 != 0))
    return false;
  if (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16) return false;
  // CUTLASS's conv iterators index in 32 bits; its optimized ones take windows up to 32 wide.
  const double limit = static_cast<double>(int64_t{1} << 31) * dtype_size(s.dtype);
  if (s.input_bytes() >= limit || s.output_bytes() >= limit || s.weight_bytes() >= limit) return false;
  for (int64_t k : s.kernel)
    if (k > 32) return false;
  if (s.batch == 0 || s.out_channels == 0) return false;
  for (int64_t v : s.output_size)
    if (v == 0) return false;
  return alignment_of(s) != 0;
}

bool conv_kernel_may_take(const ConvSpec& s, bool always) {
  return conv_kernel_covers(s) && (always || !s.transposed || s.phases_packed());
}

namespace {

// The conv's operands are of its dtype (a kernel reads one).
bool operands_of_conv_dtype(const Node& n, const ConvSpec& spec) {
  return n.input(0)->type.dtype == spec.dtype && n.input(1)->type.dtype == spec.dtype &&
         (!spec.has_bias || n.input(2)->type.dtype == spec.dtype);
}

}  // namespace

bool conv_kernel_may_take(const Node& n, bool always) {
  const auto spec = conv_spec(n);
  return spec && conv_kernel_may_take(*spec, always) && operands_of_conv_dtype(n, *spec);
}

std::optional<ConvKernelSpec> match_conv_kernel(const Node& n) {
  const auto spec = conv_spec(n);
  if (!spec || !conv_kernel_covers(*spec) || !operands_of_conv_dtype(n, *spec)) return std::nullopt;
  const TensorType& x = n.input(0)->type;
  const TensorType& w = n.input(1)->type;
  // Strides of extent-1 dims do not move an element: a 1x1 window's
  // contiguous weight is the kernel's layout too.
  if (!is_channels_last(x) || !same_strides(w.shape, w.strides, conv_kernel_weight_strides(*spec, w.shape)) ||
      !is_channels_last(n.result()->type))
    return std::nullopt;
  ConvKernelSpec s;
  s.conv = *spec;
  s.alignment = alignment_of(*spec);
  const auto rounded = [](const Value* v) { return v->producer != nullptr && v->producer->op == Op::RoundTf32; };
  s.rounded_operands = spec->dtype == DType::f32 && spec->tf32 && rounded(n.input(0)) && rounded(n.input(1));
  return s;
}

bool direct_conv_covers(const ConvSpec& s) {
  // Not where the conv's math is TF32 (eager's is): the IEEE result lies
  // TF32's error from eager's, beyond allclose's 1e-4 after a batch norm
  // (H200, 6 -> 48 channels). Operands rounded to tf32 as staged (nearest,
  // ties away) still differed from cuDNN's small-channel TF32 kernel by 5e-4
  // in 0.04 % of the elements, where ties fall.
  if (s.transposed || !(s.dims == 2 || s.dims == 3) || s.dtype != DType::f32 || s.tf32 || s.batch == 0 ||
      s.out_channels == 0)
    return false;
  double pixels = 1;
  for (int64_t v : s.output_size) {
    if (v == 0) return false;
    pixels *= static_cast<double>(v);
  }
  // Grid limits (samples x output depths on z, groups x channel blocks on y)
  // and the epilogue's 32-bit pixel index.
  if (s.batch * (s.dims == 3 ? s.output_size[0] : 1) > 65535 || s.out_channels > 65535) return false;
  if (static_cast<double>(s.batch) * pixels >= static_cast<double>(int64_t{1} << 31)) return false;
  return codegen::direct_conv_fits(s);
}

std::optional<ConvKernelSpec> match_direct_conv(const Node& n) {
  const auto spec = conv_spec(n);
  if (!spec || !direct_conv_covers(*spec) || !operands_of_conv_dtype(n, *spec)) return std::nullopt;
  ConvKernelSpec s;
  s.conv = *spec;
  s.direct = true;
  return s;
}

}  // namespace ff::fusion
