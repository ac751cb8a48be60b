#include "codegen/cuda/conv_sm90.h"

#include <algorithm>
#include <sstream>

#include "codegen/cuda/conv_epilogue.h"
#include "codegen/cuda/prelude.h"
#include "codegen/cuda/sm90_mainloop.h"
#include "codegen/cuda/sm90_ss_mainloop.h"

namespace ff::codegen {

namespace {

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
     << (pointers ? "" : "    const float* x;\n") << "    int k0;  // this thread's column within each k-block\n"
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
     << "    // B's rows (the weight's output channels) hold the columns in A's order.\n"
     << "    __device__ __forceinline__ bool b_at(int kk, int& col) const { col = kk; return true; }\n"
     << "  };\n"
     << "  // Where output channel v's row of the weight (ldw elements) begins.\n"
     << "  __device__ __forceinline__ long long weight_row(int v, long long ldw) const { return v * ldw; }\n"
     << "  __device__ __forceinline__ Rows rows(int row, int k) const {\n"
     << "    Rows r;\n"
     << (pointers ? "" : "    r.x = x;\n") << "    r.k0 = k;\n"
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

// A transposed conv's implicit GEMMs, one per phase (ph_h, ph_w): the output
// pixels (h, w) with h + pad_h = ph_h mod stride_h (w alike) meet the window
// taps kh = ph_h + stride_h * th (kw alike), each from input pixel (i - th,
// j - tw), where h = ph_h - pad_h + stride_h * i. A phase's rows are its
// pixels (n, i, j) over a grid of ceil(output / stride) a dim (pixels past
// the output skipped), padded to whole 128-row tiles; the GEMM's rows take
// the phases' tiles in turn (tile t: phase t % PHASES), so that the tiles of
// one region run at once and their strided stores can fill each other's
// sectors in L2. Column k: channel k % C of phase tap k / C (th, tw).
// B's rows are the weight's output channels, [kh][kw][C] each
// (conv_kernel_weight_strides): column k lies at (kh * S + kw) * C + k % C.
std::string transposed_conv_rows(const ConvSpec& c, int64_t padded_rows) {
  auto v = [](const Shape& s, size_t i) { return std::to_string(s[i]); };
  const int64_t sh = c.stride[0], sw = c.stride[1];
  const int64_t hp = (c.output_size[0] + sh - 1) / sh, wp = (c.output_size[1] + sw - 1) / sw;
  // Offsets reach one grid row past the input (taps subtract from it).
  const double reach = static_cast<double>(c.batch + 1) * c.input_size[0] * c.input_size[1] * c.in_channels;
  const std::string offset = reach < static_cast<double>(int64_t{1} << 31) ? "int" : "long long";
  std::ostringstream os;
  os << "// A transposed conv's GEMM row m: phase, sample n, phase-grid pixel (i, j)\n"
     << "// and output pixel (h, w); false for rows past the phase's pixels or the output.\n"
     << "struct PhaseRow {\n"
     << "  static constexpr int PHASES = " << sh * sw << ", SH = " << sh << ", SW = " << sw << ";\n"
     << "  static constexpr int HP = " << hp << ", WP = " << wp << ", ROWS = " << c.batch * hp * wp
     << ";  // a phase's grid and its pixels\n"
     << "  static constexpr int PAD_H = " << v(c.padding, 0) << ", PAD_W = " << v(c.padding, 1) << ";\n"
     << "  static constexpr int P = " << v(c.output_size, 0) << ", Q = " << v(c.output_size, 1) << ";  // output\n"
     << "  int ph, pw, n, i, j, h, w;\n"
     << "  __device__ __forceinline__ bool of(int m) {\n"
     << "    constexpr int BM = ff_sm90::ss::BM;  // the mainloop's tile rows\n"
     << "    const int tile = m / BM, phase = tile % PHASES, r = tile / PHASES * BM + m % BM;\n"
     << "    ph = phase / SW;\n"
     << "    pw = phase % SW;\n"
     << "    n = r / (HP * WP);\n"
     << "    // i, j from the first grid pixel at or past the output's origin.\n"
     << "    i = r / WP % HP + (PAD_H - ph + SH - 1) / SH;\n"
     << "    j = r % WP + (PAD_W - pw + SW - 1) / SW;\n"
     << "    h = ph - PAD_H + SH * i;\n"
     << "    w = pw - PAD_W + SW * j;\n"
     << "    return r < ROWS && h < P && w < Q;\n"
     << "  }\n"
     << "};\n"
     << "static_assert(" << padded_rows << " % (ff_sm90::ss::BM * PhaseRow::PHASES) == 0, \"whole tiles a phase\");\n"
     << "struct ConvA {\n"
     << "  static constexpr int C = " << c.in_channels << ", H = " << v(c.input_size, 0)
     << ", W = " << v(c.input_size, 1) << ";  // input\n"
     << "  static constexpr int R = " << v(c.kernel, 0) << ", S = " << v(c.kernel, 1) << ";  // window\n"
     << "  static constexpr int SP = " << (c.kernel[1] + sw - 1) / sw << ";  // taps a phase along w\n"
     << "  using Offset = " << offset << ";  // an element's offset in the input\n"
     << "  const float* x;\n"
     << "  struct Rows {\n"
     << "    const float* x;\n"
     << "    int k0;  // this thread's column within each k-block\n"
     << "    int ph, pw;  // the tile's phase\n"
     << "    // Per row: input pixel (i, j)'s channel 0 (tap 0), an offset from x\n"
     << "    // (pointers, 8 more registers, spill in the producer at 128 columns).\n"
     << "    Offset origin[8];\n"
     << "    int i0[8], j0[8];\n"
     << "    // Column k's phase tap (th, tw), and whether the window has it: always\n"
     << "    // where the stride divides the window. (Where it does not, the test\n"
     << "    // keeps the producer's loop over its rows from unrolling, nvcc 13, and\n"
     << "    // its arrays go to local memory.)\n"
     << "    __device__ __forceinline__ bool tap(int k, int& th, int& tw) const {\n"
     << "      const int t = k / C;\n"
     << "      th = t / SP;\n"
     << "      tw = t % SP;\n"
     << "      return "
     << (c.kernel[0] % sh == 0 && c.kernel[1] % sw == 0 ? "true"
                                                        : "ph + PhaseRow::SH * th < R && pw + PhaseRow::SW * tw < S")
     << ";\n"
     << "    }\n"
     << "    __device__ __forceinline__ bool at(int i, int kk, const float*& src) const {\n"
     << "      const int k = k0 + kk;\n"
     << "      int th, tw;\n"
     << "      const bool in_window = tap(k, th, tw);\n"
     << "      const int h = i0[i] - th, w = j0[i] - tw;\n"
     << "      src = x + (origin[i] - (th * W + tw) * C + k % C);\n"
     << "      return in_window && static_cast<unsigned>(h) < H && static_cast<unsigned>(w) < W;\n"
     << "    }\n"
     << "    __device__ __forceinline__ bool b_at(int kk, int& col) const {\n"
     << "      const int k = k0 + kk;\n"
     << "      int th, tw;\n"
     << "      const bool in_window = tap(k, th, tw);\n"
     << "      col = ((ph + PhaseRow::SH * th) * S + pw + PhaseRow::SW * tw) * C + k % C - k0;\n"
     << "      return in_window;\n"
     << "    }\n"
     << "  };\n"
     << "  __device__ __forceinline__ Rows rows(int row, int k) const {\n"
     << "    Rows r;\n"
     << "    r.x = x;\n"
     << "    r.k0 = k;\n"
     << "#pragma unroll\n"
     << "    for (int i = 0; i < 8; ++i) {\n"
     << "      PhaseRow p;\n"
     << "      const bool ok = p.of(row + 16 * i);\n"
     << "      r.ph = p.ph;  // the same for the tile's rows\n"
     << "      r.pw = p.pw;\n"
     << "      r.i0[i] = ok ? p.i : -(1 << 29);  // a row past the output fails every bounds test\n"
     << "      r.j0[i] = p.j;\n"
     << "      r.origin[i] = ok ? ((static_cast<Offset>(p.n) * H + p.i) * W + p.j) * C : 0;\n"
     << "    }\n"
     << "    return r;\n"
     << "  }\n"
     << "};\n";
  return os.str();
}

// A transposed conv whose phases are packed into one GEMM (ConvSpec::
// phases_packed): row m is grid pixel (n, i, j), column v is (phase row ph,
// output channel, phase column pw), k is a channel c of phase tap (th, tw)
// = input pixel (i - th, j - tw) (`column` below). The wide tile's producer
// reads the weights' rows where weight_row says (the prepared weight is
// [out][kh][kw][C], conv_kernel_weight_strides: row v's column k lies at
// (ph + SH th, pw + SW tw) of channel c), the pixels' rows as Rows says.
std::string packed_conv_rows(const ConvSpec& c) {
  auto v = [](const Shape& s, size_t i) { return std::to_string(s[i]); };
  const ConvSpec::GridRange gi = c.phase_grid(0), gj = c.phase_grid(1);
  // Grid pixels reach past the input (the taps subtract from them): the
  // largest origin's offset decides the offsets' type.
  const double reach = ((static_cast<double>(c.batch - 1) * c.input_size[0] + gi.first + gi.extent) *
                            static_cast<double>(c.input_size[1]) +
                        gj.first + gj.extent) *
                       c.in_channels;
  const std::string offset = reach < static_cast<double>(int64_t{1} << 31) ? "int" : "long long";
  // Column k's phase tap (th, tw) and channel c. Where whole k-blocks are one
  // tap's channels, k-block kb holds tap kb % T of channels BK (kb / T) on:
  // a block of channels' taps in turn, whose pixels overlap (H100, 128 input
  // channels, a 4x4 window of stride 2: 291 -> 285 us against all channels'
  // tap 0 first).
  const int64_t bk = Sm90SsTile::bk;
  const std::string column =
      c.in_channels % bk == 0
          ? "const int k = k0 + kk, t = k / " + std::to_string(bk) + " % T, th = t / TW, tw = t % TW, c = k / (" +
                std::to_string(bk) + " * T) * " + std::to_string(bk) + " + k % " + std::to_string(bk) + ";"
          : std::string("const int k = k0 + kk, t = k / C, th = t / TW, tw = t % TW, c = k % C;");
  std::ostringstream os;
  os << "// The grid of a transposed conv's packed phases: grid pixel (i, j) holds output\n"
     << "// pixel (SH i + ph - PAD_H, SW j + pw - PAD_W) of phase (ph, pw).\n"
     << "struct PhaseGrid {\n"
     << "  static constexpr int SH = " << c.stride[0] << ", SW = " << c.stride[1] << ", K_OUT = " << c.out_channels
     << ";  // strides, output channels\n"
     << "  static constexpr int GI = " << gi.extent << ", GJ = " << gj.extent << ", I0 = " << gi.first
     << ", J0 = " << gj.first << ";  // the grid's extent and first pixel\n"
     << "  static constexpr int PAD_H = " << v(c.padding, 0) << ", PAD_W = " << v(c.padding, 1) << ";\n"
     << "  static constexpr int P = " << v(c.output_size, 0) << ", Q = " << v(c.output_size, 1) << ";  // output\n"
     << "  // GEMM row m's sample n and grid pixel (i, j), and its phase (0, 0) output pixel (h, w).\n"
     << "  struct Pixel {\n"
     << "    int n, i, j, h, w;\n"
     << "  };\n"
     << "  static __device__ __forceinline__ Pixel pixel(int m) {\n"
     << "    Pixel p;\n"
     << "    p.n = m / (GI * GJ);\n"
     << "    p.i = m / GJ % GI + I0;\n"
     << "    p.j = m % GJ + J0;\n"
     << "    p.h = SH * p.i - PAD_H;\n"
     << "    p.w = SW * p.j - PAD_W;\n"
     << "    return p;\n"
     << "  }\n"
     << "};\n"
     << "struct ConvA {\n"
     << "  static constexpr int C = " << c.in_channels << ", H = " << v(c.input_size, 0)
     << ", W = " << v(c.input_size, 1) << ";  // input\n"
     << "  static constexpr int S = " << v(c.kernel, 1) << ", TW = " << c.kernel[1] / c.stride[1]
     << ", T = " << (c.kernel[0] / c.stride[0]) * (c.kernel[1] / c.stride[1])
     << ";  // the window's width, a phase's taps along it and in all\n"
     << "  using Offset = " << offset << ";  // an element's offset in the input\n"
     << "  const float* x;\n"
     << "  // Where column 0 of GEMM column v (phase (ph, pw), output channel o) lies\n"
     << "  // in the weight (ldw elements an output channel).\n"
     << "  __device__ __forceinline__ long long weight_row(int v, long long ldw) const {\n"
     << "    const int pw = v % PhaseGrid::SW, o = v / PhaseGrid::SW % PhaseGrid::K_OUT, ph = v / (PhaseGrid::SW * "
        "PhaseGrid::K_OUT);\n"
     << "    return o * ldw + (ph * S + pw) * C;\n"
     << "  }\n"
     << "  struct Rows {\n"
     << "    const float* x;\n"
     << "    int k0;  // this thread's column within each k-block\n"
     << "    // Per row: grid pixel (i, j)'s channel 0, an offset from x, and (i, j).\n"
     << "    Offset origin[8];\n"
     << "    int i0[8], j0[8];\n"
     << "    __device__ __forceinline__ bool at(int i, int kk, const float*& src) const {\n"
     << "      " << column << "\n"
     << "      const int h = i0[i] - th, w = j0[i] - tw;\n"
     << "      src = x + (origin[i] - (th * W + tw) * C + c);\n"
     << "      return static_cast<unsigned>(h) < H && static_cast<unsigned>(w) < W;\n"
     << "    }\n"
     << "    // Column k + kk's place in a weight row past column k (weight_row).\n"
     << "    __device__ __forceinline__ bool b_at(int kk, int& col) const {\n"
     << "      " << column << "\n"
     << "      col = (PhaseGrid::SH * th * S + PhaseGrid::SW * tw) * C + c - k0;\n"
     << "      return true;\n"
     << "    }\n"
     << "  };\n"
     << "  __device__ __forceinline__ Rows rows(int row, int k) const {\n"
     << "    Rows r;\n"
     << "    r.x = x;\n"
     << "    r.k0 = k;\n"
     << "#pragma unroll\n"
     << "    for (int i = 0; i < 8; ++i) {\n"
     << "      const int m = row + 16 * i;\n"
     << "      const PhaseGrid::Pixel p = PhaseGrid::pixel(m);\n"
     << "      const bool ok = m < " << c.gemm_m() << ";\n"
     << "      r.i0[i] = ok ? p.i : -(1 << 29);  // a row past M fails every bounds test\n"
     << "      r.j0[i] = p.j;\n"
     << "      r.origin[i] = ok ? ((static_cast<Offset>(p.n) * H + p.i) * W + p.j) * C : 0;\n"
     << "    }\n"
     << "    return r;\n"
     << "  }\n"
     << "};\n";
  return os.str();
}

// The packed phases' epilogue (PhaseGrid): pixel(row), GEMM row row's grid
// pixel; place(p, col), where its value at column col = (ph, o, pw) goes,
// and whether that lies inside the output (grid pixels on its edges hold
// phases outside it); next_channel(at, g), the place g output channels on
// (where CHANNEL_RUNS); and operands, put and prefetch there (skipped
// outside, by the caller for put).
std::string packed_members() {
  return "  static constexpr int SW = PhaseGrid::SW;\n"
         "  __device__ __forceinline__ PhaseGrid::Pixel pixel(int row) const { return PhaseGrid::pixel(row); }\n"
         "  struct Place {\n"
         "    int n, o, h, w;  // output element (n, o, h, w)\n"
         "    bool inside;\n"
         "  };\n"
         "  __device__ __forceinline__ Place place(const PhaseGrid::Pixel& p, int col) const {\n"
         "    const int pw = col % PhaseGrid::SW, ph = col / (PhaseGrid::SW * PhaseGrid::K_OUT);\n"
         "    const int h = p.h + ph, w = p.w + pw;\n"
         "    Place at;\n"
         "    at.n = p.n;\n"
         "    at.o = col / PhaseGrid::SW % PhaseGrid::K_OUT;\n"
         "    at.h = h;\n"
         "    at.w = w;\n"
         "    at.inside = static_cast<unsigned>(h) < PhaseGrid::P && static_cast<unsigned>(w) < PhaseGrid::Q;\n"
         "    return at;\n"
         "  }\n"
         "  // Whether channels c + SW g (g < 8 / SW, c + SW a multiple of 8) are output\n"
         "  // channels o + g of c's phase row: a phase row's SW x K_OUT channels are a multiple of 8.\n"
         "  static constexpr bool CHANNEL_RUNS = PhaseGrid::SW * PhaseGrid::K_OUT % 8 == 0;\n"
         "  __device__ __forceinline__ Place next_channel(Place at, int g) const {\n"
         "    at.o += g;\n"
         "    return at;\n"
         "  }\n"
         "  __device__ __forceinline__ Operands operands(const Place& at) const {\n"
         "    return operands_at(at.n, at.o, at.h, at.w, at.inside);\n"
         "  }\n"
         "  __device__ __forceinline__ void put(const Place& at, float v) const { put_at(at.n, at.o, at.h, at.w, v); "
         "}\n"
         "  __device__ __forceinline__ void prefetch(const Place& at) const {\n"
         "    if (at.inside) prefetch_at(at.n, at.o, at.h, at.w);\n"
         "  }\n";
}

// The transposed conv's epilogue: a GEMM row's output pixel, if any (PhaseRow).
std::string transposed_members() {
  return "  __device__ __forceinline__ void operator()(int row, int col, float v0, float v1) const {\n"
         "    PhaseRow p;\n"
         "    if (!p.of(row)) return;\n"
         "    if (col < N) store_at(p.n, col, p.h, p.w, v0);\n"
         "    if (col + 1 < N) store_at(p.n, col + 1, p.h, p.w, v1);\n"
         "  }\n";
}

// The register-fragment mainloop's epilogue member beyond operator()(row, col, v0, v1).
std::string fragment_members() {
  return "  __device__ __forceinline__ void tile(const float (&acc)[64], const ff_sm90::Fragment& f) const {\n"
         "    ff_sm90::store_pairs(*this, acc, f);\n"
         "  }\n";
}

// What the two mainloops' kernels differ in.
struct Mainloop {
  std::string math;  // the name's part: _3xtf32 or _tf32
  int64_t tiles = 0;
  int shared_bytes = 0;
  std::string description;   // the header's tile and math
  std::string source;        // the mainloop's text
  std::string launch_check;  // a static_assert of the launch's figures
  std::string call;          // the mainloop's call, from (a, b, M, N, K, ldb, epilogue)
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

// The 1xTF32 mainloop on operands rounded to tf32 beforehand (sm90_ss_mainloop.h), over `rows` rows.
Mainloop shared_operand_mainloop(const fusion::ConvKernelSpec& s, const Sm90SsTile& tile, int64_t rows) {
  Mainloop m;
  m.math = "_tf32";
  m.tiles = tile.tiles(rows, s.gemm_n());
  m.shared_bytes = tile.shared_bytes();
  m.description = std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(Sm90SsTile::bk) +
                  " tiles" + (tile.pingpong() ? " taken by the consumer warpgroups in turn" : "") +
                  (tile.wide ? " of channels x pixels (pixels on the wgmma's N side)" : "") +
                  ", TF32 on wgmma (sm_90a) from operands rounded to tf32" +
                  (tile.phase_packed ? "; results staged in shared memory, stored along the output's rows"
                   : tile.staged     ? "; results staged in shared memory, stored by bulk copies"
                                     : "");
  m.source = std::string(cuda_sm90_mainloop()) + cuda_sm90_ss_mainloop(tile);
  m.launch_check = "static_assert(ff_sm90::ss::SMEM_BYTES == " + std::to_string(m.shared_bytes) +
                   ", \"the launch's shared memory\");\n";
  m.call = "ff_sm90::ss::gemm";
  // The wide tile's producer holds two views of 8 pixel rows: a 3-D conv's,
  // with pointers, would spill its 104 registers.
  m.row_pointers = !(tile.wide && s.conv.dims == 3);
  return m;
}

}  // namespace

bool sm90_conv_applies(const fusion::ConvKernelSpec& s) {
  return s.conv.dtype == DType::f32 && s.conv.in_channels % 4 == 0 && (s.conv.dims == 2 || s.conv.dims == 3);
}

KernelSource generate_conv_sm90(const fusion::Group& group, const fusion::ConvKernelSpec& s, int id,
                                const Target& target) {
  const ConvSpec& c = s.conv;
  if (!sm90_conv_applies(s) || (c.transposed && !s.rounded_operands))
    throw IRError("conv codegen: the sm90 kernel does not cover this conv");
  const bool packed = c.phases_packed();
  // A transposed conv's tile rows are pixels a stride apart: its stores are
  // not staged in pixel runs (packed phases stage theirs by output rows).
  const bool pixel_runs = conv_stores_staged(group) && !c.transposed;
  Sm90SsTile tile = sm90_ss_tile(s.gemm_n(), s.gemm_k(), pixel_runs, pixel_runs, packed);
  tile.shared_optin = static_cast<int>(target.shared_per_block_optin);
  const PixelRunStores runs = !s.rounded_operands ? PixelRunStores::none
                              : packed            ? PixelRunStores::phases
                              : tile.wide         ? PixelRunStores::wide
                              : tile.staged       ? PixelRunStores::staged
                                                  : PixelRunStores::none;
  // The GEMM's rows: a transposed conv's phases (unpacked) padded to whole tiles (transposed_conv_rows).
  const bool phase_tiles = c.transposed && !packed;
  const int64_t per_phase = s.gemm_m() / c.phases();
  const int64_t rows = phase_tiles ? (per_phase + tile.bm - 1) / tile.bm * tile.bm * c.phases() : s.gemm_m();
  // B's rows: a transposed conv's phases take taps from the whole window.
  const int64_t ldb = c.transposed ? c.in_channels * numel(c.kernel) : s.gemm_k();
  KernelSource ks;
  const std::string members =
      packed        ? packed_members()
      : phase_tiles ? transposed_members()
                    : "  __device__ __forceinline__ void operator()(int row, int col, float v0, float v1) const {\n"
                      "    store(row, col, v0);\n"
                      "    store(row, col + 1, v1);\n"
                      "  }\n" +
                          (s.rounded_operands ? std::string() : fragment_members());
  const ConvEpilogue epilogue = conv_epilogue(group, s, ks, members, runs);
  tile.channel_operands = epilogue.channel_operands;
  const Mainloop mainloop = s.rounded_operands ? shared_operand_mainloop(s, tile, rows) : fragment_mainloop(s);
  ks.name = conv_kernel_name(group, s) + mainloop.math + "_sm90_" + std::to_string(id);
  ks.sm90a = true;
  ks.block = kSm90Threads;
  ks.unroll = 1;
  // Persistent CTAs, one per SM (a CTA's 384 threads hold the register
  // file): each loads its next tile while storing the last.
  ks.grid[0] = std::min<int64_t>(mainloop.tiles, target.sm_count);
  ks.items = mainloop.tiles;
  ks.shared_bytes = mainloop.shared_bytes;
  ks.align_bytes = 16;
  ks.vector_width = 4;

  std::ostringstream os;
  os << "// Generated by fuseforge: " << ks.name << "\n";
  for (const Node* n : group.nodes) os << "//   " << print_node(*n) << "\n";
  os << "// implicit GEMM M " << rows
     << (packed ? " (grid pixels), N " + std::to_string(s.gemm_n()) + " (phases x channels)"
         : phase_tiles
             ? " (pixels of " + std::to_string(c.phases()) + " phases), N " + std::to_string(s.gemm_n()) + " (channels)"
             : " (pixels), N " + std::to_string(s.gemm_n()) + " (channels)")
     << ", K " << s.gemm_k() << "; " << mainloop.description << "\n";
  os << cuda_prelude() << cuda_half_prelude() << mainloop.source;
  os << "\nnamespace {\n"
     << "constexpr int M = " << rows << ", N = " << s.gemm_n() << ", K = " << s.gemm_k() << ", LDB = " << ldb
     << ";  // pixels, output channels, window x input channels, B's row\n"
     << (packed        ? packed_conv_rows(c)
         : phase_tiles ? transposed_conv_rows(c, rows)
                       : conv_rows(c, rows, mainloop.row_pointers))
     << epilogue.definition << mainloop.launch_check << "}  // namespace\n\n"
     << "FF_EXTERN_C __global__ void __launch_bounds__(" << kSm90Threads << ", 1) " << ks.name << "("
     << epilogue.parameters << ") {\n"
     << "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
     << "  const FusedEpilogue epilogue{" << epilogue.arguments << "};\n"
     << "  // Run-time sizes (`opaque` is 0): with constant ones ptxas serializes the wgmmas (gemm_sm90.cc).\n"
     << "  const int opaque = static_cast<int>(blockDim.z >> 16);\n"
     << "  " << mainloop.call << "(ConvA{x}, w, M + opaque, N + opaque, K + opaque, LDB + opaque, epilogue);\n"
     << sm90_kernel_end();
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
