#include "codegen/cuda/conv_direct.h"

#include <algorithm>
#include <sstream>

#include "codegen/cuda/conv_epilogue.h"
#include "codegen/cuda/prelude.h"
#include "codegen/cuda/reduction_prelude.h"

namespace ff::codegen {

namespace {

// Static shared memory a block stages its input channels' windows and their
// weights in: 48 KiB at most, and four blocks an SM.
constexpr int kStagedBytes = 46 * 1024;
constexpr int kMaxRowRegisters = 32;  // input values an adjacent-columns thread keeps per window row
constexpr int64_t kBlocksPerSm = 8;   // blocks of a grid an SM of the target

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// The input extent one window covers along spatial dim d.
int span_of(const ConvSpec& c, size_t d) { return static_cast<int>((c.kernel[d] - 1) * c.dilation[d] + 1); }

int64_t taps_of(const ConvSpec& c) {
  int64_t taps = 1;
  for (int64_t k : c.kernel) taps *= k;
  return taps;
}

// A staged input channel's window and weights, bytes.
int64_t channel_bytes(const DirectConvTile& t, const ConvSpec& c) {
  return int64_t{t.ts} * t.ih * t.iw_padded * 4 + taps_of(c) * t.cob * 4;
}

// The tile for `cob` output channels a thread.
DirectConvTile tile_of(const ConvSpec& c, int cob, int64_t blocks_wanted) {
  DirectConvTile t;
  const size_t d0 = c.dims == 3 ? 1 : 0;  // H's index in the spatial vectors
  const int64_t P = c.output_size[d0], Q = c.output_size[d0 + 1];
  const int64_t out_per_group = c.out_per_group();
  t.cob = cob;
  // At most 48 accumulators a thread.
  const int max_px = std::min(Q >= 4 ? 4 : Q >= 2 ? 2 : 1, 48 / t.cob);
  // With few channels a thread's input loads outweigh its FMAs: adjacent
  // columns share their windows' inputs, read once into registers.
  t.adjacent = t.cob < 4 && (max_px - 1) * c.stride[d0 + 1] + span_of(c, d0 + 1) <= kMaxRowRegisters;
  // A row's columns: px a thread, tq threads (a warp's at most; 8 for
  // adjacent columns, whose reads stride by px). Scored as the share of
  // issued instructions that are useful FMAs: a tap's px input loads and two
  // of weights per 8 px FMAs, times the share of the columns computed that
  // the row has (46 columns: 3 x 16 rather than 4 x 16, which idles 18).
  // Ties go to more columns a thread, then more threads (wider stores).
  double best = -1;
  for (int px = max_px; px >= std::max(1, max_px - 2); --px)
    for (int tq = std::min(t.adjacent ? 8 : 32, pow2_at_least((Q + px - 1) / px)); tq >= 1; tq /= 2) {
      const int64_t covered = (Q + tq * px - 1) / (tq * px) * tq * px;
      const double score = 8.0 * px / (9.0 * px + 2) * static_cast<double>(Q) / static_cast<double>(covered);
      if (score > best * 1.005) best = score, t.px = px, t.tq = tq;
      if (tq <= 8) break;
    }
  t.tp = 256 / t.tq;
  // No more rows than the output has, but at least two warps a block.
  while (t.tp / 2 >= P && t.threads() > 64) t.tp /= 2;
  t.ts = c.dims == 3 ? span_of(c, 0) : 1;
  // The window's extent for the rows (tp) chosen so far; channel_bytes.
  auto channel = [&] {
    t.ih = static_cast<int>((t.tp - 1) * c.stride[d0]) + span_of(c, d0);
    t.iw = static_cast<int>((t.tq * t.px - 1) * c.stride[d0 + 1]) + span_of(c, d0 + 1);
    // A warp's rows on distinct banks: a pitch of tq mod 32 where its threads
    // read adjacent words; of 1 mod 4 where they read every 4th (adjacent
    // columns: 8 threads a row, 4 rows).
    const int to = t.adjacent ? (1 - t.iw) % 4 : (t.tq - t.iw) % 32;
    t.iw_padded = t.iw + (to + 32) % (t.adjacent ? 4 : 32);
    return channel_bytes(t, c);
  };
  while (channel() > kStagedBytes && t.tp > 1) t.tp /= 2;
  // Half the rows where that stages every input channel at once (for the
  // channel blocks below), keeping four warps a block.
  const int64_t cg = c.in_per_group();
  if (cg * channel() > kStagedBytes && t.tp > 1 && t.threads() >= 256) {
    t.tp /= 2;
    if (cg * channel() > kStagedBytes) t.tp *= 2;
    channel();
  }
  // As few stages as fit, equally full: a part-empty last stage would compute on zeros.
  const int64_t most = std::max<int64_t>(1, std::min(cg, kStagedBytes / channel()));
  const int64_t stages = (cg + most - 1) / most;
  t.cib = static_cast<int>((cg + stages - 1) / stages);
  // Where one stage holds every input channel, a block computes several
  // blocks of output channels from it: the window is staged once for them
  // all (H200, 6 -> 48 channels, 3x3: its loads and their index math had
  // been half the kernel's stalls). As many as keep 8 blocks an SM.
  const int64_t channel_blocks = (out_per_group + t.cob - 1) / t.cob;
  const int64_t tiles = ((P + t.tp - 1) / t.tp) * ((Q + t.tq * t.px - 1) / (t.tq * t.px)) * c.batch *
                        (c.dims == 3 ? c.output_size[0] : 1) * c.groups;
  t.cpb = stages == 1 ? static_cast<int>(channel_blocks) : 1;
  while (t.cpb > 1 && tiles * ((channel_blocks + t.cpb - 1) / t.cpb) < blocks_wanted) t.cpb = (t.cpb + 1) / 2;
  return t;
}

// A reduction over the channels in the kernel, as the reduction kernels'
// accumulators (reduction_prelude.h) compute it: the accumulator's type, how
// a channel's value `cv` joins red[j], and the result.
struct ChannelReduction {
  const char *type, *push, *result;
};
ChannelReduction channel_reduction(fusion::ConvKernelSpec::ChannelReduce r) {
  using R = fusion::ConvKernelSpec::ChannelReduce;
  switch (r) {
    case R::min:
      return {"ff_min<float>", "red[j].push(cv)", "red[j].m"};
    case R::max:
      return {"ff_max<float>", "red[j].push(cv)", "red[j].m"};
    case R::sum:
    case R::mean:
      return {"ff_sum<float>", "red[j].push(cv)", "red[j].s"};  // the mean divides as it stores
    case R::logsumexp:
      return {"ff_maxsumexp<float>", "red[j].merge({cv, 1.0f})", "red[j].logsumexp()"};
    case R::none:
      break;
  }
  return {"", "", ""};
}

}  // namespace

DirectConvTile choose_direct_conv_tile(const ConvSpec& c, const Target& target, bool all_channels) {
  // 8 output channels a thread (fewer rounded up to a power of two). Where
  // the input channels come in several stages, each block of output channels
  // stages them all again: 12 a thread where they come in 12s, for fewer
  // blocks (H200, 3x3x3, 8 -> 24 channels: 0.718 -> 0.653 ms; with one
  // stage, 6 -> 48 channels: 0.454 -> 0.508).
  const int64_t out = c.out_per_group();
  const int64_t blocks_wanted = kBlocksPerSm * target.sm_count;
  DirectConvTile t = tile_of(c, out >= 8 ? 8 : pow2_at_least(out), blocks_wanted);
  if (t.cib < c.in_per_group() && out % 12 == 0) t = tile_of(c, 12, blocks_wanted);
  if (all_channels) t.cpb = static_cast<int>((out + t.cob - 1) / t.cob);
  return t;
}

// A stage's bytes do not depend on cpb, the one thing the target decides.
bool direct_conv_fits(const ConvSpec& c) {
  return channel_bytes(choose_direct_conv_tile(c, default_target()), c) <= kStagedBytes;
}

KernelSource generate_conv_direct(const fusion::Group& group, const fusion::ConvKernelSpec& s, int id,
                                  const Target& target) {
  const ConvSpec& c = s.conv;
  if (!(c.dims == 2 || c.dims == 3) || c.dtype != DType::f32)
    throw IRError("direct conv codegen: expected a 2-D or 3-D f32 conv");
  const bool three_d = c.dims == 3;
  const size_t d0 = three_d ? 1 : 0;  // H's index in the spatial vectors
  const bool reduces = s.channel_reduce != fusion::ConvKernelSpec::ChannelReduce::none;
  if (reduces && c.groups != 1) throw IRError("direct conv codegen: a reduction over the channels of a grouped conv");
  const DirectConvTile t = choose_direct_conv_tile(c, target, reduces);
  const Node& conv = *group.nodes.front();
  const Shape& x_strides = conv.input(0)->type.strides;  // n, c, [d,] h, w
  const Shape& w_strides = conv.input(1)->type.strides;
  const size_t hd = d0 + 2;  // H's index in the strides
  auto v = [](int64_t i) { return std::to_string(i); };
  const int64_t P = c.output_size[d0], Q = c.output_size[d0 + 1], Z = three_d ? c.output_size[0] : 1;
  const int64_t tiles_q = (Q + t.tq * t.px - 1) / (t.tq * t.px), tiles_p = (P + t.tp - 1) / t.tp;
  const int64_t channel_blocks = (c.out_per_group() + t.cob - 1) / t.cob;
  const int64_t blocks_per_group = (channel_blocks + t.cpb - 1) / t.cpb;
  const int64_t taps = taps_of(c);

  KernelSource ks;
  ks.name = conv_kernel_name(group, s) + "_direct_" + std::to_string(id);
  const ConvEpilogue epilogue = conv_epilogue(group, s, ks);
  ks.block = t.threads();
  ks.unroll = 1;
  ks.grid[0] = tiles_p * tiles_q;
  ks.grid[1] = c.groups * blocks_per_group;
  ks.grid[2] = c.batch * Z;
  ks.items = ks.grid[0] * ks.grid[1] * ks.grid[2];

  std::ostringstream os;
  os << "// Generated by fuseforge: " << ks.name << "; direct, IEEE f32, " << c.in_per_group() * taps
     << " FMAs an output, a block " << t.cob * t.cpb << " channels"
     << (t.cpb > 1 ? " (" + v(t.cpb) + " x " + v(t.cob) + ")" : "") << " x " << (three_d ? "1x" : "") << t.tp << "x"
     << t.tq * t.px << " outputs, a thread " << t.cob << " channels x " << t.px << " columns "
     << (t.adjacent ? std::string("adjacent") : std::to_string(t.tq) + " apart") << ", " << t.cib
     << " input channel(s) a stage" << (reduces ? ", reducing the channels" : "") << "\n";
  for (const Node* n : group.nodes) os << "//   " << print_node(*n) << "\n";
  os << cuda_prelude();
  if (reduces) os << cuda_reduction_prelude();
  os << "\nnamespace {\n"
     << "constexpr int M = " << s.gemm_m() << ", N = " << c.out_channels << ";  // pixels, output channels\n"
     << epilogue.definition << "struct __align__(16) ff_f4 { float x, y, z, w; };\n"
     << "}  // namespace\n\n";

  os << "FF_EXTERN_C __global__ void __launch_bounds__(" << ks.block << ") " << ks.name << "(" << epilogue.parameters
     << ") {\n"
     << "  constexpr int CG = " << c.in_per_group() << ", KG = " << c.out_per_group()
     << ";  // input and output channels per group\n"
     << "  constexpr int H = " << c.input_size[d0] << ", W = " << c.input_size[d0 + 1] << ", P = " << P << ", Q = " << Q
     << ", R = " << c.kernel[d0] << ", S = " << c.kernel[d0 + 1] << ";\n"
     << "  constexpr int SH = " << c.stride[d0] << ", SW = " << c.stride[d0 + 1] << ", PH = " << c.padding[d0]
     << ", PW = " << c.padding[d0 + 1] << ", DH = " << c.dilation[d0] << ", DW = " << c.dilation[d0 + 1] << ";\n";
  if (three_d)
    os << "  constexpr int D = " << c.input_size[0] << ", Z = " << Z << ", T = " << c.kernel[0]
       << ", SD = " << c.stride[0] << ", PD = " << c.padding[0] << ", DD = " << c.dilation[0] << ";  // depth\n";
  else
    os << "  constexpr int T = 1, DD = 1;  // no depth\n";
  os << "  constexpr int PX = " << t.px << ", TQ = " << t.tq << ", TP = " << t.tp << ", COB = " << t.cob
     << ", CIB = " << t.cib << ", THREADS = TQ * TP;\n"
     << "  // Blocks of COB output channels in a group, and how many a block computes in turn.\n"
     << "  constexpr int KB = " << channel_blocks << ", CPB = " << t.cpb << ";\n"
     << (t.adjacent
             ? "  constexpr int ROW = (PX - 1) * SW + (S - 1) * DW + 1;  // a window row of PX adjacent outputs\n"
             : "")
     << "  // One input channel's staged window: TS depths of IH rows of IW columns, IWP apart.\n"
     << "  constexpr int TS = " << t.ts << ", IH = " << t.ih << ", IW = " << t.iw << ", IWP = " << t.iw_padded << ";\n"
     << "  __shared__ float xs[CIB * TS * IH * IWP];\n"
     << "  // The staged channels' weights, tap-major: a tap's COB channel weights are adjacent.\n"
     << "  __align__(16) __shared__ float wsm[CIB * T * R * S * COB];\n"
     << "  const int p0 = blockIdx.x / " << tiles_q << " * TP, q0 = blockIdx.x % " << tiles_q << " * (TQ * PX);\n"
     << "  const int g = blockIdx.y / " << blocks_per_group << ", kb0 = blockIdx.y % " << blocks_per_group
     << " * CPB;  // the group, its first channel block here\n"
     << (three_d ? "  const long long n = blockIdx.z / Z;\n  const int z = blockIdx.z % Z;\n"
                 : "  const long long n = blockIdx.z;\n")
     << "  const float* xg = x + n * " << x_strides[0] << "LL + static_cast<long long>(g) * CG * " << x_strides[1]
     << "LL;\n"
     << "  const int tp = threadIdx.x / TQ, tq = threadIdx.x % TQ;\n"
     << "  const int p = p0 + tp;\n"
     << "  const FusedEpilogue epi{" << epilogue.arguments << "};\n";
  const ChannelReduction red = channel_reduction(s.channel_reduce);
  if (reduces)
    os << "  " << red.type << " red[PX];  // this thread's columns' reduction over the channels so far\n"
       << "  #pragma unroll\n  for (int j = 0; j < PX; ++j) red[j] = " << red.type << "::identity();\n";
  os << "  #pragma unroll 1\n"
     << "  for (int kb = kb0; kb < kb0 + CPB && kb < KB; ++kb) {\n"
     << "    const int k0 = kb * COB;\n"
     << "    float acc[COB][PX];\n"
     << "    #pragma unroll\n    for (int k = 0; k < COB; ++k)\n      #pragma unroll\n"
     << "      for (int j = 0; j < PX; ++j) acc[k][j] = 0.f;\n"
     << "    for (int c0 = 0; c0 < CG; c0 += CIB) {\n"
     << "      // Stage CIB input channels of the tile's window (zeros outside the input),\n"
     << "      // once for every channel block where they are all the input channels.\n"
     << "      if (CIB < CG || kb == kb0) {\n"
     << "        for (unsigned i = threadIdx.x; i < CIB * TS * IH * IW; i += THREADS) {\n"
     << "          // Element i: column iw of window row `row`, which is row ih of depth ts of channel ci.\n"
     << "          const unsigned row = i / IW, iw = i - row * IW;\n"
     << "          const unsigned ih = row % IH, ts = row / IH % TS, ci = row / (IH * TS);\n"
     << "          const int ch = c0 + ci, h = p0 * SH - PH + ih, w_ = q0 * SW - PW + iw;\n"
     << (three_d ? "          const int d = z * SD - PD + ts;\n" : "          (void)ts;\n")
     << "          float v = 0.f;\n"
     << "          if (ch < CG && static_cast<unsigned>(h) < H && static_cast<unsigned>(w_) < W"
     << (three_d ? " && static_cast<unsigned>(d) < D" : "") << ")\n"
     << "            v = xg[ch * " << x_strides[1] << "LL + " << (three_d ? "d * " + v(x_strides[2]) + "LL + " : "")
     << "h * " << x_strides[hd] << "LL + w_ * " << x_strides[hd + 1] << "LL];\n"
     << "          xs[row * IWP + iw] = v;\n"
     << "        }\n"
     << "      }\n"
     << "      for (int i = threadIdx.x; i < CIB * T * R * S * COB; i += THREADS) {\n"
     << "        const int k = i % COB, tap = i / COB, ci = tap / (T * R * S);\n"
     << "        const int t = tap / (R * S) % T, r = tap / S % R, s = tap % S;\n"
     << "        const int kk = k0 + k, ch = c0 + ci;\n"
     << "        (void)t;\n"
     << "        wsm[i] = kk < KG && ch < CG ? w[static_cast<long long>(g * KG + kk) * " << w_strides[0] << " + ch * "
     << w_strides[1] << "LL + " << (three_d ? "t * " + v(w_strides[2]) + "LL + " : "") << "r * " << w_strides[hd]
     << " + s * " << w_strides[hd + 1] << "] : 0.f;\n"
     << "      }\n"
     << "      __syncthreads();\n"
     << "      " << (int64_t{t.cib} * taps <= 64 ? "#pragma unroll" : "#pragma unroll 1") << "\n"
     << "      for (int ci = 0; ci < CIB; ++ci) {\n"
     << "        #pragma unroll\n"
     << "        for (int t = 0; t < T; ++t) {\n"
     << "          #pragma unroll\n"
     << "          for (int r = 0; r < R; ++r) {\n"
     << (t.adjacent ? "            // Tap row (t, r) of this thread's windows: output j (column q0 + tq * PX + j)\n"
                      "            // reads in_row[j * SW + s * DW] at tap s; the row's inputs go to registers once.\n"
                      "            const float* in_row =\n"
                      "                xs + ((ci * TS + t * DD) * IH + tp * SH + r * DH) * IWP + tq * PX * SW;\n"
                      "            float xr[ROW];\n"
                      "            #pragma unroll\n"
                      "            for (int i = 0; i < ROW; ++i) xr[i] = in_row[i];\n"
                    : "            // Tap row (t, r) of this thread's windows: output j (column q0 + j * TQ + tq)\n"
                      "            // reads in_row[j * TQ * SW + s * DW] at tap s.\n"
                      "            const float* in_row =\n"
                      "                xs + ((ci * TS + t * DD) * IH + tp * SH + r * DH) * IWP + tq * SW;\n")
     << "            #pragma unroll\n"
     << "            for (int s = 0; s < S; ++s) {\n"
     << "              const float* wt = wsm + (((ci * T + t) * R + r) * S + s) * COB;\n"
     << "              float wk[COB];\n";
  if (t.cob % 4 == 0)
    os << "              #pragma unroll\n"
       << "              for (int k = 0; k < COB; k += 4) {  // 16-byte loads: every thread reads the same weights\n"
       << "                const ff_f4 v = *reinterpret_cast<const ff_f4*>(wt + k);\n"
       << "                wk[k] = v.x; wk[k + 1] = v.y; wk[k + 2] = v.z; wk[k + 3] = v.w;\n"
       << "              }\n";
  else
    os << "              #pragma unroll\n"
       << "              for (int k = 0; k < COB; ++k) wk[k] = wt[k];\n";
  os << "              #pragma unroll\n"
     << "              for (int j = 0; j < PX; ++j) {\n"
     << (t.adjacent ? "                const float v = xr[j * SW + s * DW];\n"
                    : "                const float v = in_row[j * TQ * SW + s * DW];\n")
     << "                #pragma unroll\n"
     << "                for (int k = 0; k < COB; ++k) acc[k][j] = fmaf(v, wk[k], acc[k][j]);\n"
     << "              }\n"
     << "            }\n"
     << "          }\n"
     << "        }\n"
     << "      }\n"
     << "      __syncthreads();  // before the next stage's (or channel block's) staging\n"
     << "    }\n"
     << (t.adjacent || reduces ? "" : "    // For each j, a warp's threads store adjacent columns of a row.\n")
     << "    #pragma unroll\n"
     << "    for (int k = 0; k < COB; ++k) {\n"
     << "      if (p >= P || k0 + k >= KG) break;\n"
     << "      #pragma unroll\n"
     << "      for (int j = 0; j < PX; ++j) {\n"
     << (t.adjacent ? "        const int q = q0 + tq * PX + j;\n" : "        const int q = q0 + j * TQ + tq;\n");
  if (reduces)
    os << "        if (q >= Q) continue;\n"
       << "        const float cv = epi.reduce_input(n, k0 + k, " << (three_d ? "z, " : "") << "p, q, acc[k][j]);\n"
       << "        " << red.push << ";\n";
  else
    os << "        if (q < Q) epi.store_at(n, g * KG + k0 + k, " << (three_d ? "z, " : "") << "p, q, acc[k][j]);\n";
  os << "      }\n"
     << "    }\n"
     << "  }\n";
  if (reduces)
    os << "  // Every channel is in: the reduction's result per column.\n"
       << "  #pragma unroll\n"
       << "  for (int j = 0; j < PX; ++j) {\n"
       << (t.adjacent ? "    const int q = q0 + tq * PX + j;\n" : "    const int q = q0 + j * TQ + tq;\n")
       << "    if (p < P && q < Q) epi.store_reduced(n, " << (three_d ? "z, " : "") << "p, q, " << red.result << ");\n"
       << "  }\n";
  os << "}\n";
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
