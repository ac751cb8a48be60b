#include "fusion/conv.h"

namespace ff::fusion {

int64_t ConvKernelSpec::gemm_m() const {
  int64_t m = conv.batch;
  for (int64_t v : conv.output_size) m *= v;
  return m;
}

int64_t ConvKernelSpec::gemm_k() const {
  int64_t k = conv.in_channels;
  for (int64_t v : conv.kernel) k *= v;
  return k;
}

std::optional<ConvKernelSpec> match_conv_kernel(const Node& n) {
  const auto spec = conv_spec(n);
  if (!spec || spec->transposed || spec->groups != 1 || (spec->dims != 2 && spec->dims != 3)) return std::nullopt;
  if (spec->dtype != DType::f32 && spec->dtype != DType::f16 && spec->dtype != DType::bf16) return std::nullopt;
  const TensorType& x = n.input(0)->type;
  const TensorType& w = n.input(1)->type;
  const TensorType& y = n.result()->type;
  if (!is_channels_last(x) || !is_channels_last(w) || !is_channels_last(y) || w.dtype != spec->dtype ||
      x.dtype != spec->dtype)
    return std::nullopt;
  if (spec->has_bias && n.input(2)->type.dtype != spec->dtype) return std::nullopt;
  // CUTLASS's conv iterators index in 32 bits; its optimized ones take
  // windows up to 32 wide.
  constexpr int64_t kIndexLimit = int64_t{1} << 31;
  if (numel(x.shape) >= kIndexLimit || numel(y.shape) >= kIndexLimit || numel(w.shape) >= kIndexLimit)
    return std::nullopt;
  for (int64_t k : spec->kernel)
    if (k > 32) return std::nullopt;
  if (spec->batch == 0 || numel(y.shape) == 0) return std::nullopt;
  ConvKernelSpec s;
  s.conv = *spec;
  const int element = dtype_size(spec->dtype);
  for (int a = 16 / element; a >= 1; a /= 2)
    if (spec->in_channels % a == 0) {
      s.alignment = a;
      break;
    }
  if (s.alignment * element < 4) return std::nullopt;  // cp.async moves 4 bytes at least
  if (spec->dims == 3 && s.alignment * element != 16) return std::nullopt;  // CUTLASS's 3-D iterators load 16 bytes
  return s;
}

}  // namespace ff::fusion
