// Matmul evaluation: mm, bmm and addmm accumulated in double.
#include "interp/eval.h"

namespace ff::interp {

// mm / bmm / addmm(bias, a, b) = beta * bias + alpha * (a @ b), accumulated in double.
HostTensor eval_matmul(const Node& n, const Env& env) {
  bool addmm = n.op == Op::Addmm;
  const HostTensor& a = value_of(env, n, addmm ? 1 : 0);
  const HostTensor& b = value_of(env, n, addmm ? 2 : 1);
  HostTensor out = result_tensor(n);
  size_t rank = n.op == Op::Bmm ? 3 : 2;
  if (a.shape.size() != rank || b.shape.size() != rank || a.shape[rank - 1] != b.shape[rank - 2] ||
      (rank == 3 && a.shape[0] != b.shape[0]))
    fail(n, "operand shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) + " do not fit");
  int64_t batch = rank == 3 ? a.shape[0] : 1, M = a.shape[rank - 2], K = a.shape[rank - 1], N = b.shape[rank - 1];
  Shape expect = rank == 3 ? Shape{batch, M, N} : Shape{M, N};
  if (out.shape != expect) fail(n, "result shape " + shape_str(out.shape) + " != " + shape_str(expect));
  double alpha = addmm && n.has_attr("alpha") ? n.attr_float("alpha") : 1.0;
  double beta = addmm && n.has_attr("beta") ? n.attr_float("beta") : 1.0;
  std::vector<double> bias;
  if (addmm && beta != 0.0) {  // beta == 0 ignores the bias, NaNs included (as PyTorch does)
    const HostTensor& t = value_of(env, n, 0);
    if (!broadcasts_to(t.shape, out.shape))
      fail(n, "bias " + shape_str(t.shape) + " does not broadcast to " + shape_str(out.shape));
    bias = gather(t.data, strided_offsets(out.shape, broadcast_strides(t.shape, out.shape)));
  }
  for (int64_t p = 0; p < batch; ++p) {
    const double* A = a.data.data() + p * M * K;
    const double* B = b.data.data() + p * K * N;
    double* C = out.data.data() + p * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
        int64_t o = i * N + j;
        C[o] = bias.empty() ? alpha * acc : beta * bias[static_cast<size_t>(p * M * N + o)] + alpha * acc;
      }
  }
  return out;
}

}  // namespace ff::interp
