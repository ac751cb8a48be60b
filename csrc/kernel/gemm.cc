#include "kernel/gemm.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

namespace ff::fusion {

namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

// The last two dims of `t` as a matrix [rows, cols]; `batch` leading dim (0 or 1 dims).
std::optional<GemmOperand> operand_layout(const TensorType& t, int64_t rows, int64_t cols) {
  const size_t r = t.shape.size();
  if (r < 2) return std::nullopt;
  const int64_t sr = t.strides[r - 2], sc = t.strides[r - 1];
  GemmOperand op;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
    op = {true, rows == 1 ? cols : sr, 0};
  } else if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
    op = {false, cols == 1 ? rows : sc, 0};
  } else {
    return std::nullopt;
  }
  if (op.ld <= 0 || op.ld * std::max(rows, cols) > kMaxIndex) return std::nullopt;
  if (r == 3) op.batch_stride = t.shape[0] == 1 ? 0 : t.strides[0];
  return op;
}

int64_t gcd(int64_t a, int64_t b) {
  a = a < 0 ? -a : a;
  while (b != 0) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// The largest vector width up to `max_vec` dividing every value of `vs`.
int vector_width(std::initializer_list<int64_t> vs, int max_vec) {
  int64_t g = 0;
  for (int64_t v : vs) g = gcd(v, g);
  int w = 1;
  while (w < max_vec && g % (w * 2) == 0) w *= 2;
  return w;
}

}  // namespace

std::optional<GemmSpec> match_gemm(const Node& n) {
  if (n.op != Op::Mm && n.op != Op::Addmm && n.op != Op::Bmm) return std::nullopt;
  const bool addmm = n.op == Op::Addmm;
  const Value* a = n.input(addmm ? 1 : 0);
  const Value* b = n.input(addmm ? 2 : 1);
  const TensorType& out = n.result()->type;
  GemmSpec s;
  s.dtype = out.dtype;
  if (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16) return std::nullopt;
  if (!a || !b || a->type.dtype != s.dtype || b->type.dtype != s.dtype) return std::nullopt;
  if (!out.is_contiguous()) return std::nullopt;
  const size_t rank = n.op == Op::Bmm ? 3 : 2;
  if (out.shape.size() != rank || a->type.shape.size() != rank || b->type.shape.size() != rank) return std::nullopt;
  s.batch = rank == 3 ? out.shape[0] : 1;
  s.m = out.shape[rank - 2];
  s.n = out.shape[rank - 1];
  s.k = a->type.shape[rank - 1];
  if (s.batch < 1 || s.batch > 65535 || s.m < 1 || s.n < 1 || s.k < 1) return std::nullopt;
  if (s.m * s.n > kMaxIndex || s.m > kMaxIndex / 2 || s.n > kMaxIndex / 2 || s.k > kMaxIndex / 2) return std::nullopt;
  auto oa = operand_layout(a->type, s.m, s.k);
  auto ob = operand_layout(b->type, s.k, s.n);
  if (!oa || !ob) return std::nullopt;
  s.a = *oa;
  s.b = *ob;

  if (addmm) {
    s.alpha = n.has_attr("alpha") ? n.attr_float("alpha") : 1.0;
    s.beta = n.has_attr("beta") ? n.attr_float("beta") : 1.0;
    const Value* c = n.input(0);
    if (!c || c->type.dtype != s.dtype) return std::nullopt;
    if (s.beta != 0.0) {
      const Shape& cs = c->type.shape;
      const Shape& st = c->type.strides;
      s.source = GemmSpec::Source::Bias;
      if (cs.size() == 1 && cs[0] == s.n && (s.n == 1 || st[0] == 1)) {
        s.ldc = 0;  // per-column bias: every row reads the same vector
      } else if (cs.size() == 2 && cs[0] == 1 && cs[1] == s.n && (s.n == 1 || st[1] == 1)) {
        s.ldc = 0;
      } else if (cs.size() == 2 && cs[0] == s.m && cs[1] == s.n && (s.n == 1 || st[1] == 1) &&
                 (s.m == 1 || st[0] >= s.n)) {
        s.ldc = s.m == 1 ? s.n : st[0];
        if (s.ldc * s.m > kMaxIndex) return std::nullopt;
      } else {
        return std::nullopt;  // per-row or otherwise strided bias
      }
    }
  }

  // One vector width for every access: it must divide each leading dimension,
  // batch stride and the extent along each operand's unit-stride dim.
  s.alignment = vector_width({s.a.ld, s.a.batch_stride, s.a.row_major ? s.k : s.m, s.b.ld, s.b.batch_stride,
                              s.b.row_major ? s.n : s.k, s.n, s.m * s.n, s.ldc},
                             16 / dtype_size(s.dtype));
  if (s.alignment * dtype_size(s.dtype) < 4) return std::nullopt;  // cp.async copies 4 bytes at least
  return s;
}

bool use_as_source(GemmSpec& s, const Value& x) {
  if (s.source != GemmSpec::Source::None || x.type.dtype != s.dtype) return false;
  const Shape& shape = x.type.shape;
  const Shape& st = x.type.strides;
  const size_t r = shape.size();
  const size_t out_rank = s.batch > 1 ? 3 : 2;
  if (r == 0 || r > 3) return false;
  int64_t ldc = 0, batch_stride = 0;
  // Right-aligned dims of x against [batch, m, n]; missing leading dims broadcast.
  auto dim = [&](size_t from_right) -> int64_t { return from_right < r ? shape[r - 1 - from_right] : 1; };
  auto stride = [&](size_t from_right) -> int64_t { return from_right < r ? st[r - 1 - from_right] : 0; };
  if (r > out_rank && shape[0] != 1) return false;
  if (dim(0) != s.n || (s.n > 1 && stride(0) != 1)) return false;
  if (dim(1) == s.m && s.m > 1) {
    ldc = stride(1);
    if (ldc < s.n || ldc * s.m > kMaxIndex) return false;
  } else if (dim(1) != 1) {
    return false;
  }
  if (out_rank == 3 && dim(2) == s.batch && s.batch > 1)
    batch_stride = stride(2);
  else if (dim(2) != 1)
    return false;
  const int w = vector_width({ldc, batch_stride, s.alignment}, s.alignment);
  if (w * dtype_size(s.dtype) < 4) return false;
  s.alignment = w;
  s.ldc = ldc;
  s.batch_stride_c = batch_stride;
  s.source = GemmSpec::Source::EpilogueInput;
  return true;
}

}  // namespace ff::fusion
