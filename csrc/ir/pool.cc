#include "ir/pool.h"

#include <algorithm>
#include <string>

namespace ff {

namespace {
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
}  // namespace

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  // ceil_mode: the last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

int64_t PoolSpec::window_begin(size_t d, int64_t o) const {
  int64_t b = o * stride[d] - padding[d];
  if (b < 0) b += (-b + dilation[d] - 1) / dilation[d] * dilation[d];  // first tap inside
  return b;
}

int64_t PoolSpec::window_end(size_t d, int64_t o) const {
  return std::min(o * stride[d] - padding[d] + (kernel[d] - 1) * dilation[d] + 1, input_size[d]);
}

int64_t PoolSpec::avg_divisor(const Shape& out_index) const {
  if (divisor_override) return divisor_override;
  int64_t n = 1;
  for (size_t d = 0; d < kernel.size(); ++d) {
    const int64_t start = out_index[d] * stride[d] - padding[d];
    const int64_t end = std::min(start + kernel[d], input_size[d] + padding[d]);
    n *= count_include_pad ? end - start : std::min(end, input_size[d]) - std::max<int64_t>(start, 0);
  }
  return n;
}

bool PoolSpec::windows_overhang() const {
  for (size_t d = 0; d < kernel.size(); ++d)
    if (padding[d] > 0 || (output_size[d] - 1) * stride[d] + (kernel[d] - 1) * dilation[d] >= input_size[d])
      return true;
  return false;
}

bool PoolSpec::same_windows(const PoolSpec& o) const {
  return kernel == o.kernel && stride == o.stride && padding == o.padding && dilation == o.dilation &&
         input_size == o.input_size && output_size == o.output_size;
}

std::optional<PoolSpec> pool_spec(const Node& n, const Shape& input) {
  if (n.op != Op::MaxPool && n.op != Op::AvgPool) return std::nullopt;
  auto fail = [&](const std::string& why) -> void { throw IRError(std::string(op_name(n.op)) + ": " + why); };
  PoolSpec s;
  s.max = n.op == Op::MaxPool;
  s.kernel = n.attr_ints("kernel");
  s.dims = static_cast<int>(s.kernel.size());
  if (s.dims < 1 || s.dims > 3) fail("kernel must have 1 to 3 entries");
  if (input.size() < static_cast<size_t>(s.dims) + 1)
    fail("input of rank " + std::to_string(input.size()) + " for a " + std::to_string(s.dims) + "-d window");
  // Bounds that keep the window arithmetic (sizes, taps, avg_pool's
  // divisor) far inside int64: no real pool comes near them.
  constexpr int64_t kMaxEntry = int64_t{1} << 31, kMaxWindow = int64_t{1} << 31, kMaxDim = int64_t{1} << 40;
  auto per_dim = [&](const char* key, int64_t dflt, int64_t least) {
    Shape v = n.has_attr(key) ? n.attr_ints(key) : Shape(s.kernel.size(), dflt);
    if (v.size() != s.kernel.size()) fail(std::string(key) + " must have one entry per kernel dim");
    for (int64_t e : v) {
      if (e < least) fail(std::string(key) + " entries must be >= " + std::to_string(least));
      if (e > kMaxEntry) fail(std::string(key) + " entries must be at most 2^31");
    }
    return v;
  };
  s.stride = per_dim("stride", 1, 1);
  s.padding = per_dim("padding", 0, 0);
  s.dilation = s.max ? per_dim("dilation", 1, 1) : Shape(s.kernel.size(), 1);
  s.ceil_mode = n.attr_bool_or("ceil_mode", false);
  s.count_include_pad = n.attr_bool_or("count_include_pad", true);
  s.divisor_override = s.max ? 0 : n.attr_int_or("divisor_override", 0);
  if (s.divisor_override < 0) fail("divisor_override must be positive");
  const size_t lead = input.size() - s.kernel.size();
  int64_t window = 1;
  for (size_t d = 0; d < s.kernel.size(); ++d) {
    if (s.kernel[d] < 1) fail("kernel entries must be >= 1");
    if (s.kernel[d] > kMaxEntry || (window *= s.kernel[d]) > kMaxWindow) fail("the window must have at most 2^31 taps");
    if (input[lead + d] > kMaxDim) fail("pooled dims must be at most 2^40 long");
    if (2 * s.padding[d] > s.kernel[d]) fail("padding must be at most half the kernel");
    s.input_size.push_back(input[lead + d]);
    const int64_t o =
        pool_output_size(input[lead + d], s.kernel[d], s.padding[d], s.stride[d], s.dilation[d], s.ceil_mode);
    if (o < 1) fail("the window does not fit the input's dim " + std::to_string(lead + d));
    s.output_size.push_back(o);
  }
  return s;
}

}  // namespace ff
