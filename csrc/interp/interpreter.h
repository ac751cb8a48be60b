#pragma once
// CPU reference interpreter: executes a graph with plain loops, holding every
// value in double and rounding each result to its dtype (as eager PyTorch
// stores it), with double accumulation in reductions and matmuls. It is how
// tests prove that a pass or a fusion preserves meaning. Opaque and conv ops
// have no reference semantics here: is_interpretable() says so.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ff::interp {

// A dense, contiguous tensor of logical values (strides of the IR type only
// describe device layout; values here are always row-major).
struct HostTensor {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> data;  // numel(shape) entries, row-major
};

// Runs `g` on `inputs` (one per g.inputs(), same order, shapes must match).
// Returns the values of g.outputs(), then the new value of each mutation.
// Throws IRError for a shape/dtype mismatch or an op it cannot run.
std::vector<HostTensor> run(const Graph& g, const std::vector<HostTensor>& inputs);

// True when every node can be interpreted; otherwise `why` names the first op that cannot.
bool is_interpretable(const Graph& g, std::string* why = nullptr);

// Deterministic pseudo-random tensor of `type`: floats uniform in [-2, 2),
// integers in [0, 8), bools 50/50; already rounded to the dtype.
HostTensor random_tensor(const TensorType& type, uint64_t seed);
// Random inputs for all of g's inputs.
std::vector<HostTensor> random_inputs(const Graph& g, uint64_t seed);

// Largest |a - b| over all elements (NaN in exactly one side counts as infinity;
// NaN in both as equal). Throws IRError if shapes differ.
double max_abs_diff(const HostTensor& a, const HostTensor& b);
// Every element satisfies |a - b| <= atol + rtol * |b| (NaNs must match).
bool allclose(const HostTensor& a, const HostTensor& b, double rtol, double atol);

}  // namespace ff::interp
