// Reference semantics of convolution (ir/conv.h's ConvSpec), forward and
// transposed, any groups, accumulated in double: the forward conv gathers,
// for each output, its window of every input channel of its group; the
// transposed one scatters each input element through its window.
#include "interp/eval.h"
#include "ir/conv.h"

namespace ff::interp {

namespace {

// Row-major coordinates of flat index i in `extents`.
void unflatten(int64_t i, const Shape& extents, Shape& at) {
  for (size_t d = extents.size(); d-- > 0;) {
    at[d] = i % extents[d];
    i /= extents[d];
  }
}

}  // namespace

HostTensor eval_conv(const Node& n, const Env& env) {
  const auto spec = conv_spec(n);
  if (!spec) fail(n, "not a convolution of a shape the IR describes");
  const ConvSpec& s = *spec;
  const HostTensor& x = value_of(env, n, 0);
  const HostTensor& w = value_of(env, n, 1);
  HostTensor out = result_tensor(n);
  const size_t dims = static_cast<size_t>(s.dims);
  const int64_t in_plane = numel(s.input_size), out_plane = numel(s.output_size), taps = numel(s.kernel);
  const int64_t cg = s.in_per_group(), kg = s.out_per_group();
  Shape tap(dims), pix(dims);
  // Where window tap `tap` of position `pix` lands on the other side (the
  // input of a forward conv, the output of a transposed one), row-major in
  // its plane of `extent`; -1 outside it.
  auto position = [&](const Shape& extent) {
    int64_t offset = 0;
    for (size_t d = 0; d < dims; ++d) {
      const int64_t v = pix[d] * s.stride[d] - s.padding[d] + tap[d] * s.dilation[d];
      if (v < 0 || v >= extent[d]) return int64_t{-1};
      offset = offset * extent[d] + v;
    }
    return offset;
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t g = 0; g < s.groups; ++g) {
      if (!s.transposed) {
        for (int64_t k = 0; k < kg; ++k)
          for (int64_t o = 0; o < out_plane; ++o) {
            unflatten(o, s.output_size, pix);
            double acc = 0.0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t t = 0; t < taps; ++t) {
                unflatten(t, s.kernel, tap);
                const int64_t at = position(s.input_size);
                if (at >= 0)
                  acc += x.data[((b * s.in_channels + g * cg + c) * in_plane) + at] *
                         w.data[((g * kg + k) * cg + c) * taps + t];
              }
            out.data[(b * s.out_channels + g * kg + k) * out_plane + o] = acc;
          }
      } else {
        // Weight [in_channels, out_channels / groups, window...].
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t i = 0; i < in_plane; ++i) {
            unflatten(i, s.input_size, pix);
            const double v = x.data[(b * s.in_channels + g * cg + c) * in_plane + i];
            for (int64_t k = 0; k < kg; ++k)
              for (int64_t t = 0; t < taps; ++t) {
                unflatten(t, s.kernel, tap);
                const int64_t at = position(s.output_size);
                if (at >= 0)
                  out.data[(b * s.out_channels + g * kg + k) * out_plane + at] +=
                      v * w.data[((g * cg + c) * kg + k) * taps + t];
              }
          }
      }
    }
  if (s.has_bias) {
    const HostTensor& bias = value_of(env, n, 2);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t k = 0; k < s.out_channels; ++k)
        for (int64_t o = 0; o < out_plane; ++o) out.data[(b * s.out_channels + k) * out_plane + o] += bias.data[k];
  }
  return out;
}

}  // namespace ff::interp
