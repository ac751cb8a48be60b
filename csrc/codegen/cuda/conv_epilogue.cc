#include "codegen/cuda/conv_epilogue.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_map>

#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/op_expr.h"

namespace ff::codegen {

namespace {

// An element's offset in the epilogue's index names (n, col, then z/p/q).
std::string offset(const Shape& strides, const std::vector<std::string>& index) {
  std::string off;
  for (size_t d = 0; d < strides.size(); ++d)
    if (strides[d] != 0)
      off += (off.empty() ? "" : " + ") + index[d] + (strides[d] == 1 ? "" : " * " + std::to_string(strides[d]));
  return off.empty() ? "0" : off;
}

// Whether some offset into a tensor of `shape` with `strides` reaches 2^31.
bool needs_64bit(const Shape& shape, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return last >= (int64_t{1} << 31);
}

// A direct kernel's reduction over the output channels (ConvKernelSpec::
// channel_reduce): reduce_input(n, col, [z,] p, q, acc), the value the
// reduction takes from the conv's accumulator `acc` at that output element
// (`v`: the conv's value, then the nodes before the reduction), and
// store_reduced(n, [z,] p, q, r), which takes the reduction's result at that
// pixel (for a mean, the sum: divided here, as the reduction kernels do)
// through the nodes after it and writes the output.
void emit_channel_reduction(std::ostringstream& os, const fusion::Group& group, const Value* out,
                            std::unordered_map<const Value*, std::string> expr_of, const std::string& v,
                            const std::string& idx, bool three_d, std::vector<std::string> index) {
  const Node& conv = *group.nodes.front();
  size_t r = 1;
  while (op_kind(group.nodes[r]->op) == OpKind::Pointwise) ++r;
  const Node& red = *group.nodes[r];
  const std::vector<Node*> before(group.nodes.begin() + 1, group.nodes.begin() + r);
  const std::vector<Node*> after(group.nodes.begin() + r + 1, group.nodes.end());
  const std::string spatial = (three_d ? idx + " z, " : "") + idx + " p, " + idx + " q";
  std::ostringstream body;
  emit_pointwise_body(body, before, "    ", expr_of);
  os << "  // The value the channel reduction (" << op_name(red.op) << ") takes at output element (n, col, "
     << (three_d ? "z, " : "") << "p, q).\n"
     << "  __device__ __forceinline__ float reduce_input(" << idx << " n, " << idx << " col, " << spatial
     << ", float acc) const {\n"
     << "    const float v = " << v << ";\n"
     << body.str() << "    return " << expr_of.at(red.input(0)) << ";\n"
     << "  }\n";
  const Shape& shape = conv.result()->type.shape;
  // The output's strides along the conv's dims: none along the channels (a
  // kept dim of 1, or none without keepdim).
  Shape strides = out->type.strides;
  if (out->type.shape.size() == shape.size())
    strides[1] = 0;
  else
    strides.insert(strides.begin() + 1, 0);
  const std::string channels = cuda_literal(Scalar::of_float(static_cast<double>(shape[1])), DType::f32);
  std::unordered_map<const Value*, std::string> reduced{{red.result(), red.op == Op::Mean ? "r / " + channels : "r"}};
  std::ostringstream tail;
  emit_pointwise_body(tail, after, "    ", reduced);
  index[1] = "0";
  os << "  // The reduction's result r at output pixel (n, " << (three_d ? "z, " : "")
     << "p, q), through the nodes after it.\n"
     << "  __device__ __forceinline__ void store_reduced(" << idx << " n, " << spatial << ", float r) const {\n"
     << tail.str() << "    out[" << offset(strides, index) << "] = ff_store<" << cuda_storage_type(out->type.dtype)
     << ">(" << reduced.at(out) << ");\n"
     << "  }\n";
}

}  // namespace

std::string conv_kernel_name(const fusion::Group& group, const fusion::ConvKernelSpec& s) {
  std::string name = "ff_conv" + std::to_string(s.conv.dims) + "d";
  std::set<std::string> seen;
  for (auto it = group.nodes.begin() + 1; it != group.nodes.end(); ++it) {
    if (seen.size() == 4) return name + "_etc";
    if (seen.insert(std::string(op_name((*it)->op))).second) name += "_" + std::string(op_name((*it)->op));
  }
  return name;
}

bool conv_stores_staged(const fusion::Group& group) {
  if (group.nodes.empty() || group.outputs.size() != 1) return false;
  const Value* out = group.outputs[0];
  const Shape& shape = group.nodes.front()->result()->type.shape;  // [N, K, (Z,) P, Q]
  if (out->type.dtype != DType::f32 || out->type.shape != shape) return false;
  const Shape strides = broadcast_strides(out->type, shape);
  int64_t pixels = 1;  // the spatial dims, innermost first, must be contiguous
  for (size_t d = shape.size(); d-- > 2;) {
    if (strides[d] != pixels) return false;
    pixels *= shape[d];
  }
  // Every run of a channel's pixels 16-byte aligned and a multiple of 16 bytes.
  return pixels % 4 == 0 && strides[0] % 4 == 0 && strides[1] % 4 == 0 && strides[1] >= pixels;
}

ConvEpilogue conv_epilogue(const fusion::Group& group, const fusion::ConvKernelSpec& s, KernelSource& ks,
                           const std::string& members, PixelRunStores runs) {
  const ConvSpec& c = s.conv;
  if (group.nodes.empty() || group.outputs.size() != 1) throw IRError("conv codegen: expected a conv and one output");
  const Node& conv = *group.nodes.front();
  const Value* out = group.outputs[0];
  const Shape& shape = conv.result()->type.shape;  // [N, K, (Z,) P, Q]
  const bool three_d = c.dims == 3;

  ks.outputs = {out->name};
  ks.inputs = {conv.input(0)->name, conv.input(1)->name};
  if (c.has_bias) ks.inputs.push_back(conv.input(2)->name);
  std::vector<const Value*> extra;  // tensors the epilogue reads besides the conv's result
  for (const Value* v : group.inputs)
    if (v != conv.input(0) && v != conv.input(1) && !(c.has_bias && v == conv.input(2))) extra.push_back(v);
  for (const Value* v : extra) ks.inputs.push_back(v->name);

  const std::string el = cuda_storage_type(c.dtype);
  ConvEpilogue e;
  std::ostringstream params, args, os;
  params << cuda_storage_type(out->type.dtype) << "* __restrict__ out, const " << el << "* __restrict__ x, const " << el
         << "* __restrict__ w";
  args << "out";
  os << "struct FusedEpilogue {\n  " << cuda_storage_type(out->type.dtype) << "* __restrict__ out;\n";
  if (c.has_bias) {
    params << ", const " << el << "* __restrict__ bias";
    args << ", bias";
    os << "  const " << el << "* __restrict__ bias;\n";
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    const std::string t = "const " + cuda_storage_type(extra[i]->type.dtype) + "* __restrict__ in" + std::to_string(i);
    params << ", " << t;
    args << ", in" << i;
    os << "  " << t << ";\n";
  }

  // Index names of an output element: n, col (the channel), then the spatial ones.
  std::vector<std::string> index{"n", "col"};
  for (const char* d : {"z", "p", "q"}) index.push_back(d);
  if (!three_d) index.erase(index.begin() + 2);
  bool wide = needs_64bit(out->type.shape, out->type.strides);
  for (const Value* v : extra) wide |= needs_64bit(v->type.shape, v->type.strides);
  std::unordered_map<const Value*, std::string> expr_of{{conv.result(), "v"}};
  for (size_t i = 0; i < extra.size(); ++i)
    expr_of[extra[i]] =
        "ff_load(in" + std::to_string(i) + "[" + offset(broadcast_strides(extra[i]->type, shape), index) + "])";
  const std::vector<Node*> epilogue(group.nodes.begin() + 1, group.nodes.end());
  const std::string round = c.dtype == DType::f16 ? "ff_round_f16" : c.dtype == DType::bf16 ? "ff_round_bf16" : "";
  const Shape out_strides = broadcast_strides(out->type, shape);
  e.channels_inner = out_strides[1] == 1;

  const int64_t P = shape[shape.size() - 2], Q = shape.back(), Z = three_d ? shape[2] : 1;
  const std::string idx = wide ? "long long" : "int";
  const std::string spatial = three_d ? "z, p, q" : "p, q";
  // The output coordinates (n, col, [z,] p, q) of GEMM row `row`, column `col`.
  const std::string at_row = "row / " + std::to_string(P * Q * Z) + ", col, " +
                             (three_d ? "row / " + std::to_string(P * Q) + " % " + std::to_string(Z) + ", " : "") +
                             "row / " + std::to_string(Q) + " % " + std::to_string(P) + ", row % " + std::to_string(Q);
  // The conv's value from acc, as eager: its result rounded to its dtype,
  // then the bias (whose expression is `bias`) added and rounded.
  const auto rounded = [&](const std::string& x) { return round.empty() ? x : round + "(" + x + ")"; };
  const auto conv_value = [&](const std::string& bias) {
    return c.has_bias ? rounded(rounded("acc") + " + " + bias) : rounded("acc");
  };
  if (s.channel_reduce != fusion::ConvKernelSpec::ChannelReduce::none) {
    emit_channel_reduction(os, group, out, expr_of, conv_value("ff_load(bias[col])"), idx, three_d, index);
    os << members << "};\n";
    e.parameters = params.str();
    e.arguments = args.str();
    e.definition = os.str();
    return e;
  }
  os << "  // acc: the implicit GEMM's value at (row: output pixel, col: output channel).\n"
     << "  __device__ __forceinline__ void store(int row, int col, float acc) const {\n"
     << "    if (row >= M || col >= N) return;\n"
     << "    store_at(" << at_row << ", acc);\n"
     << "  }\n";
  // The body of a value: v from acc and `bias` (the bias's expression), then
  // the epilogue's nodes reading their inputs as `exprs` says.
  const auto value_body = [&](std::unordered_map<const Value*, std::string> exprs, const std::string& bias) {
    std::ostringstream body;
    emit_pointwise_body(body, epilogue, "    ", exprs);
    return "    const float v = " + conv_value(bias) + ";\n" + body.str() + "    return " + exprs.at(out) + ";\n";
  };
  const std::string coords = idx + " n, " + idx + " col, " + (three_d ? idx + " z, " : "") + idx + " p, " + idx + " q";
  os << "  // The same at output element (n, col, " << spatial << "), inside the output.\n"
     << "  __device__ __forceinline__ void store_at(" << coords << ", float acc) const {\n"
     << "    out[" << offset(out_strides, index) << "] = ff_store<" << cuda_storage_type(out->type.dtype)
     << ">(value_at(n, col, " << spatial << ", acc));\n"
     << "  }\n"
     << "  __device__ __forceinline__ float value_at(" << coords << ", float acc) const {\n"
     << "    // v: the conv's value" << (c.has_bias ? " plus its bias" : "") << "; then " << epilogue.size()
     << " fused pointwise op(s).\n"
     << value_body(expr_of, "ff_load(bias[col])") << "  }\n";
  if (runs == PixelRunStores::phases) {
    // The operands apart from the math: a kernel loads a batch of elements'
    // operands, then computes their values, whose math may branch (a
    // division's slow path) where no load moves past (H100, a residual +
    // hardswish, each element's loads waiting in turn: 582 -> 356 us).
    std::unordered_map<const Value*, std::string> from_operands{{conv.result(), "v"}};
    std::ostringstream fields, loads, prefetches;
    std::vector<std::string> pinned;  // the f32 fields' asm operands
    if (c.has_bias) {
      fields << " float bias;";
      loads << "    o.bias = ff_load(bias[col]);\n";
      pinned.push_back("\"+f\"(bias)");
    }
    for (size_t i = 0; i < extra.size(); ++i) {
      const std::string name = "in" + std::to_string(i), type = cuda_compute_type(extra[i]->type.dtype);
      fields << " " << type << " " << name << ";";
      from_operands[extra[i]] = "o." + name;
      if (type == "float") pinned.push_back("\"+f\"(" + name + ")");
      const Shape strides = broadcast_strides(extra[i]->type, shape);
      if (std::any_of(strides.begin() + 2, strides.end(),
                      [](int64_t s) { return s != 0; })) {  // varies along the pixels
        loads << "    o." << name << " = inside ? " << expr_of.at(extra[i]) << " : static_cast<" << type << ">(0);\n";
        prefetches << "    asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(in" << i << " + ("
                   << offset(strides, index) << ")));\n";
      } else {
        loads << "    o." << name << " = " << expr_of.at(extra[i]) << ";\n";
      }
    }
    // pin(): the loads are done here (nvcc otherwise sinks each next to its
    // use, past the branches of the values before it).
    std::string pin;
    for (const std::string& p : pinned) pin += (pin.empty() ? "" : ", ") + p;
    os << "  struct Operands {\n   " << fields.str() << "\n"
       << "    __device__ __forceinline__ void pin() {" << (pin.empty() ? "" : " asm volatile(\"\" : " + pin + ");")
       << " }\n"
       << "  };\n"
       << "  // Those that vary along the pixels only `inside` the output (else zeros).\n"
       << "  __device__ __forceinline__ Operands operands_at(" << coords << ", bool inside) const {\n"
       << "    Operands o;\n"
       << loads.str() << "    return o;\n"
       << "  }\n"
       << "  __device__ __forceinline__ float value_with(const Operands& o, float acc) const {\n"
       << value_body(from_operands, "o.bias") << "  }\n"
       << "  // Into L2: the lines of the operands that vary along the pixels.\n"
       << "  __device__ __forceinline__ void prefetch_at(" << coords << ") const {\n"
       << prefetches.str() << "  }\n"
       << "  __device__ __forceinline__ void put_at(" << coords << ", float v) const {\n"
       << "    out[" << offset(out_strides, index) << "] = ff_store<" << cuda_storage_type(out->type.dtype) << ">(v);\n"
       << "  }\n";
  }
  if (runs == PixelRunStores::staged || runs == PixelRunStores::wide)
    os << "  static constexpr int SAMPLE = " << P * Q * Z << ";  // pixels a sample\n"
       << "  __device__ __forceinline__ float* column(int n, int col) const {\n"
       << "    return out + static_cast<long long>(n) * " << out_strides[0] << " + static_cast<long long>(col) * "
       << out_strides[1] << ";\n"
       << "  }\n";
  if (runs == PixelRunStores::wide)
    os << "  __device__ __forceinline__ float value(int row, int col, float acc) const {\n"
       << "    return value_at(" << at_row << ", acc);\n"
       << "  }\n";
  if (runs == PixelRunStores::staged) {
    // Staged stores (sm90_ss_mainloop.h): the value alone, with its
    // per-channel operands from the tile's table.
    std::vector<std::string> loads;  // the per-channel operands' loads at col
    std::unordered_map<const Value*, std::string> from_table{{conv.result(), "v"}};
    const auto entry = [&](const std::string& load) {
      loads.push_back(load);
      return "table[" + std::to_string(loads.size() - 1) + " * ff_sm90::ss::BN + (col & (ff_sm90::ss::BN - 1))]";
    };
    const std::string bias = c.has_bias ? entry("ff_load(bias[col])") : "";
    for (size_t i = 0; i < extra.size(); ++i) {
      const Shape strides = broadcast_strides(extra[i]->type, shape);
      bool per_channel = strides[1] != 0;
      for (size_t d = 0; d < strides.size(); ++d) per_channel &= d == 1 || strides[d] == 0;
      from_table[extra[i]] = per_channel ? entry(expr_of.at(extra[i])) : expr_of.at(extra[i]);
    }
    e.channel_operands = static_cast<int>(loads.size());
    os << "  static constexpr int CHANNEL_OPERANDS = " << loads.size() << ";\n"
       << "  __device__ __forceinline__ float channel_operand(int i, int col) const {\n";
    for (size_t i = 0; i < loads.size(); ++i) os << "    if (i == " << i << ") return " << loads[i] << ";\n";
    os << "    return 0.0f;\n"
       << "  }\n"
       << "  __device__ __forceinline__ float value(int row, int col, float acc, const float* table) const {\n"
       << "    return value_at(" << at_row << ", acc, table);\n"
       << "  }\n"
       << "  __device__ __forceinline__ float value_at(" << coords << ", float acc, const float* table) const {\n"
       << value_body(from_table, bias) << "  }\n";
  }
  os << members << "};\n";
  e.parameters = params.str();
  e.arguments = args.str();
  e.definition = os.str();
  return e;
}

}  // namespace ff::codegen
