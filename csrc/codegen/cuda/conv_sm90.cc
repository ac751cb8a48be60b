#include "codegen/cuda/conv_sm90.h"

#include <algorithm>
#include <sstream>

#include "codegen/cuda/conv_epilogue.h"
#include "codegen/cuda/prelude.h"
#include "codegen/cuda/sm90_mainloop.h"
#include "codegen/cuda/sm90_ss_mainloop.h"

namespace ff::codegen {

namespace {

constexpr int64_t kH100Sms = 132;

// The implicit GEMM's A as the mainloop's producer reads it: row m is output
// pixel (n, [z,] p, q), column k is tap (of the window) k / C, channel k % C.
// Each producer thread keeps, per row of its 8, where its window's origin
// lies (a pointer, or where its producer's registers are too few, an offset
// from x) and the origin's coordinates, so that a k-block costs one
// decomposition of k, then a bounds test and an add per row.
std::string conv_rows(const ConvSpec& c, int64_t m, bool pointers) {
  const bool three_d = c.dims == 3;
  const size_t d0 = three_d ? 1 : 0;  // first of H, W in the spatial vectors
  auto v = [](const Shape& s, size_t i) { return std::to_string(s[i]); };
  const int64_t H = c.input_size[d0], W = c.input_size[d0 + 1], D = three_d ? c.input_size[0] : 1;
  const int64_t P = c.output_size[d0], Q = c.output_size[d0 + 1], Z = three_d ? c.output_size[0] : 1;
  std::ostringstream os;
  const int64_t elements = c.batch * D * H * W * c.in_channels;
  // Element offsets as int where the input allows (one 32-bit add a row).
  const std::string offset = elements < (int64_t{1} << 31) ? "int" : "long long";
  // Row i's address at `tap` elements from its origin.
  const auto source = [&](const std::string& tap) {
    return pointers ? "origin[i] + (" + tap + ")" : "x + (origin[i] + " + tap + ")";
  };
  os << "// The implicit GEMM's A: row m = output pixel (n, " << (three_d ? "z, " : "")
     << "p, q), column k = channel k % C of window tap k / C,\n"
     << "// read from the channels-last input; taps outside it read as zeros.\n"
     << "struct ConvA {\n"
     << "  static constexpr int C = " << c.in_channels << ", H = " << H << ", W = " << W << ", D = " << D
     << ";  // input\n"
     << "  static constexpr int P = " << P << ", Q = " << Q << ", Z = " << Z << ";  // output\n"
     << "  static constexpr int R = " << v(c.kernel, d0) << ", S = " << v(c.kernel, d0 + 1)
     << ", T = " << (three_d ? v(c.kernel, 0) : "1") << ";  // window\n"
     << "  using Offset = " << offset << ";  // an element's offset in the input\n"
     << "  const float* x;\n"
     << "  struct Rows {\n"
     << (pointers ? "" : "    const float* x;\n")
     << "    int k0;  // this thread's column within each k-block\n"
     << "    // Per row: where its window origin's channel 0 would be (outside the\n"
     << "    // input where the window is padded: only taps inside are read), the origin.\n"
     << "    " << (pointers ? "const float*" : "Offset") << " origin[8];\n"
     << "    int h0[8], w0[8]" << (three_d ? ", d0[8]" : "") << ";\n"
     << "    // A k-block's tap is the same for the 8 rows: its offset from the origin\n"
     << "    // is computed once, and a row adds its own origin and tests its bounds.\n"
     << "    __device__ __forceinline__ bool at(int i, int kk, const float*& src) const {\n"
     << "      const int k = k0 + kk, c = k % C, tap = k / C;\n"
     << "      const int dh = tap / S % R * " << v(c.dilation, d0) << ", dw = tap % S * " << v(c.dilation, d0 + 1)
     << ";\n";
  if (three_d)
    os << "      const int dd = tap / (S * R) * " << v(c.dilation, 0) << ";\n"
       << "      const int d = d0[i] + dd, h = h0[i] + dh, w = w0[i] + dw;\n"
       << "      if (static_cast<unsigned>(d) >= D || static_cast<unsigned>(h) >= H || static_cast<unsigned>(w) >= W)"
          " return false;\n"
       << "      src = " << source("((dd * H + dh) * W + dw) * C + c") << ";\n";
  else
    os << "      const int h = h0[i] + dh, w = w0[i] + dw;\n"
       << "      if (static_cast<unsigned>(h) >= H || static_cast<unsigned>(w) >= W) return false;\n"
       << "      src = " << source("(dh * W + dw) * C + c") << ";\n";
  os << "      return true;\n"
     << "    }\n"
     << "  };\n"
     << "  __device__ __forceinline__ Rows rows(int row, int k) const {\n"
     << "    Rows r;\n"
     << (pointers ? "" : "    r.x = x;\n")
     << "    r.k0 = k;\n"
     << "#pragma unroll\n"
     << "    for (int i = 0; i < 8; ++i) {\n"
     << "      const int m = row + 16 * i, q = m % Q, p = m / Q % P;\n"
     << "      const bool ok = m < " << m << ";\n"
     << "      r.h0[i] = ok ? p * " << v(c.stride, d0) << " - " << v(c.padding, d0)
     << " : -(1 << 29);  // a row past M fails every bounds test\n"
     << "      r.w0[i] = q * " << v(c.stride, d0 + 1) << " - " << v(c.padding, d0 + 1) << ";\n";
  if (three_d) os << "      r.d0[i] = m / (Q * P) % Z * " << v(c.stride, 0) << " - " << v(c.padding, 0) << ";\n";
  const std::string offset_of_origin =
      three_d ? "(static_cast<Offset>(m / (Q * P * Z)) * (D * H * W) + (r.d0[i] * H + r.h0[i]) * W + r.w0[i]) * C"
              : "(static_cast<Offset>(m / (Q * P)) * (H * W) + r.h0[i] * W + r.w0[i]) * C";
  os << "      r.origin[i] = " << (pointers ? "x + (" : "") << "ok ? " << offset_of_origin << " : 0"
     << (pointers ? ")" : "") << ";\n";
  if (pointers) os << "      r.origin[i] = ff_sm90::opaque_pointer(r.origin[i]);\n";
  os << "    }\n"
     << "    return r;\n"
     << "  }\n"
     << "};\n";
  return os.str();
}

// The register-fragment mainloop's epilogue member beyond operator()(row, col, v0, v1).
std::string fragment_members() {
  return "  __device__ __forceinline__ void tile(const float (&acc)[64], const ff_sm90::Fragment& f) const {\n"
         "    ff_sm90::store_pairs(*this, acc, f);\n"
         "  }\n";
}

// What the two mainloops' kernels differ in.
struct Mainloop {
  std::string math;         // the name's part: _3xtf32 or _tf32
  int64_t tiles = 0;
  int shared_bytes = 0;
  std::string description;  // the header's tile and math
  std::string source;       // the mainloop's text
  std::string launch_check;  // a static_assert of the launch's figures
  std::string call;         // the mainloop's call, from (a, b, M, N, K, ldb, epilogue)
  bool row_pointers = true;  // whether the producer has registers for a pointer per row of A (conv_rows)
};

// The register-fragment mainloop (sm90_mainloop.h): 3xTF32, or 1xTF32
// rounding its tiles itself.
Mainloop fragment_mainloop(const fusion::ConvKernelSpec& s) {
  const bool split = !s.conv.tf32;
  Mainloop m;
  m.math = split ? "_3xtf32" : "_tf32";
  m.tiles = sm90_tiles(s.gemm_m(), s.gemm_n());
  m.shared_bytes = sm90_shared_bytes(split);
  m.description = std::string("128x128x32 tiles, ") +
                  (split ? "3xTF32 on wgmma (sm_90a, fp32 accuracy)" : "TF32 on wgmma (sm_90a, fp32_precision=tf32)");
  m.source = std::string(cuda_sm90_mainloop());
  std::ostringstream check;
  check << "static_assert(ff_sm90::BM == " << kSm90Tile << " && ff_sm90::BN == " << kSm90Tile
        << " && ff_sm90::THREADS == " << kSm90Threads << " && ff_sm90::smem_bytes<" << (split ? "true" : "false")
        << ">() == " << m.shared_bytes << ", \"the launch's grid and shared memory\");\n";
  m.launch_check = check.str();
  m.call = std::string("ff_sm90::gemm_tf32<") + (split ? "true" : "false") + ">";
  // A 3-D conv's rows, 8 pointers and 24 coordinates, spill in the producer's 72 registers.
  m.row_pointers = s.conv.dims == 2;
  return m;
}

// The 1xTF32 mainloop on operands rounded to tf32 beforehand (sm90_ss_mainloop.h).
Mainloop shared_operand_mainloop(const fusion::ConvKernelSpec& s, const Sm90SsTile& tile) {
  Mainloop m;
  m.math = "_tf32";
  m.tiles = tile.tiles(s.gemm_m(), s.gemm_n());
  m.shared_bytes = tile.shared_bytes();
  m.description = std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(Sm90SsTile::bk) +
                  " tiles" + (tile.pingpong() ? " taken by the consumer warpgroups in turn" : "") +
                  ", TF32 on wgmma (sm_90a) from operands rounded to tf32" +
                  (tile.staged ? "; results staged in shared memory, stored by bulk copies" : "");
  m.source = std::string(cuda_sm90_mainloop()) + cuda_sm90_ss_mainloop(tile);
  m.launch_check = "static_assert(ff_sm90::ss::SMEM_BYTES == " + std::to_string(m.shared_bytes) +
                   ", \"the launch's shared memory\");\n";
  m.call = "ff_sm90::ss::gemm";
  return m;
}

}  // namespace

bool sm90_conv_applies(const fusion::ConvKernelSpec& s) {
  return s.conv.dtype == DType::f32 && s.conv.in_channels % 4 == 0 && (s.conv.dims == 2 || s.conv.dims == 3);
}

KernelSource generate_conv_sm90(const fusion::Group& group, const fusion::ConvKernelSpec& s, int id) {
  if (!sm90_conv_applies(s)) throw IRError("conv codegen: the sm90 kernel does not cover this conv");
  Sm90SsTile tile = sm90_ss_tile(s.gemm_n(), s.gemm_k(), conv_stores_staged(group));
  const bool staged = s.rounded_operands && tile.staged;
  KernelSource ks;
  const std::string members =
      "  __device__ __forceinline__ void operator()(int row, int col, float v0, float v1) const {\n"
      "    store(row, col, v0);\n"
      "    store(row, col + 1, v1);\n"
      "  }\n" +
      (s.rounded_operands ? std::string() : fragment_members());
  const ConvEpilogue epilogue = conv_epilogue(group, s, ks, members, staged);
  tile.channel_operands = epilogue.channel_operands;
  const Mainloop mainloop = s.rounded_operands ? shared_operand_mainloop(s, tile) : fragment_mainloop(s);
  ks.name = conv_kernel_name(group, s) + mainloop.math + "_sm90_" + std::to_string(id);
  ks.sm90a = true;
  ks.block = kSm90Threads;
  ks.unroll = 1;
  // Persistent CTAs, one per SM of an H100 SXM (a CTA's 384 threads hold the
  // register file): each loads its next tile while storing the last.
  ks.grid[0] = std::min<int64_t>(mainloop.tiles, kH100Sms);
  ks.items = mainloop.tiles;
  ks.shared_bytes = mainloop.shared_bytes;
  ks.align_bytes = 16;
  ks.vector_width = 4;

  std::ostringstream os;
  os << "// Generated by fuseforge: " << ks.name << "\n";
  for (const Node* n : group.nodes) os << "//   " << print_node(*n) << "\n";
  os << "// implicit GEMM M " << s.gemm_m() << " (pixels), N " << s.gemm_n() << " (channels), K " << s.gemm_k()
     << "; " << mainloop.description << "\n";
  os << cuda_prelude() << cuda_half_prelude() << mainloop.source;
  os << "\nnamespace {\n"
     << "constexpr int M = " << s.gemm_m() << ", N = " << s.gemm_n() << ", K = " << s.gemm_k()
     << ";  // pixels, output channels, window x input channels\n"
     << conv_rows(s.conv, s.gemm_m(), mainloop.row_pointers) << epilogue.definition << mainloop.launch_check
     << "}  // namespace\n\n"
     << "FF_EXTERN_C __global__ void __launch_bounds__(" << kSm90Threads << ", 1) " << ks.name << "("
     << epilogue.parameters << ") {\n"
     << "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
     << "  const FusedEpilogue epilogue{" << epilogue.arguments << "};\n"
     << "  // Run-time sizes (`opaque` is 0): with constant ones ptxas serializes the wgmmas (gemm_sm90.cc).\n"
     << "  const int opaque = static_cast<int>(blockDim.z >> 16);\n"
     << "  " << mainloop.call << "(ConvA{x}, w, M + opaque, N + opaque, K + opaque, K + opaque, epilogue);\n"
     << sm90_kernel_end();
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
