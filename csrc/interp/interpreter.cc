// CPU reference interpreter (see interpreter.h): the driver, random inputs
// and comparisons.
//
// Every value is a row-major HostTensor of doubles. Each node is evaluated by
// its op's reference semantics (ops.cc) into raw doubles of the node's
// declared result type, and the driver then rounds every element to the
// declared dtype, the way eager PyTorch stores each op's result.
#include <algorithm>
#include <cmath>

#include "interp/eval.h"

namespace ff::interp {

namespace {

// The declared result type is authoritative, but must agree with the op's
// shape rule: that keeps every index computed above in bounds.
void check_result_shape(const Node& n) {
  if (n.results.size() != 1) fail(n, "expected exactly one result");
  std::vector<TensorType> inferred;
  try {
    inferred = infer_result_types(n);
  } catch (const IRError& e) {
    fail(n, e.what());
  }
  if (inferred.at(0).shape != n.result()->type.shape)
    fail(n, "declared shape " + shape_str(n.result()->type.shape) + " contradicts the op's rule " +
                shape_str(inferred[0].shape));
}

void check_input(const Value& v, const HostTensor& t) {
  if (t.shape != v.type.shape || t.dtype != v.type.dtype)
    throw IRError("interp: input '%" + v.name + "' expects " + type_str(v.type.dtype, v.type.shape) + ", got " +
                  type_str(t.dtype, t.shape));
  if (static_cast<int64_t>(t.data.size()) != numel(t.shape))
    throw IRError("interp: input '%" + v.name + "' has " + std::to_string(t.data.size()) + " values for shape " +
                  shape_str(t.shape));
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

bool is_interpretable(const Graph& g, std::string* why) {
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    if (reference_semantics(n.op) != nullptr) continue;
    if (why) {
      std::string name = n.results.empty() ? "" : "%" + n.result()->name + " = ";
      std::string target =
          n.op == Op::Opaque && n.has_attr("target") ? " (target " + n.attr_string("target") + ")" : "";
      *why = "node " + name + std::string(op_name(n.op)) + target + ": op '" + std::string(op_name(n.op)) +
             "' has no reference semantics in the interpreter";
    }
    return false;
  }
  if (why) why->clear();
  return true;
}

std::vector<HostTensor> run(const Graph& g, const std::vector<HostTensor>& inputs) {
  std::string why;
  if (!is_interpretable(g, &why)) throw IRError("interp: " + why);
  if (inputs.size() != g.inputs().size())
    throw IRError("interp: graph @" + g.name + " takes " + std::to_string(g.inputs().size()) + " inputs, got " +
                  std::to_string(inputs.size()));
  Env env;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_input(*g.inputs()[i], inputs[i]);
    env[g.inputs()[i]] = inputs[i];
  }
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    check_result_shape(n);
    HostTensor out = reference_semantics(n.op)(n, env);
    for (double& v : out.data) v = round_to_dtype(v, out.dtype);
    env[n.result()] = std::move(out);
  }
  auto lookup = [&](const Value* v) -> const HostTensor& {
    auto it = env.find(v);
    if (it == env.end()) throw IRError("interp: '%" + v->name + "' is not defined in the graph");
    return it->second;
  };
  std::vector<HostTensor> results;
  for (const Value* v : g.outputs()) results.push_back(lookup(v));
  for (const auto& m : g.mutations()) results.push_back(lookup(m.value));
  return results;
}

HostTensor random_tensor(const TensorType& type, uint64_t seed) {
  HostTensor t;
  t.dtype = type.dtype;
  t.shape = type.shape;
  t.data.resize(static_cast<size_t>(numel(type.shape)));
  uint64_t state = seed;
  for (double& v : t.data) {
    uint64_t r = splitmix64(state);
    if (is_floating(type.dtype)) {
      v = round_to_dtype(-2.0 + 4.0 * static_cast<double>(r >> 11) * 0x1.0p-53, type.dtype);
      if (v >= 2.0) v = -2.0;  // rounding to a narrow dtype can reach 2; keep [-2, 2)
    } else if (is_integral(type.dtype)) {
      v = static_cast<double>(r >> 61);  // [0, 8)
    } else {
      v = static_cast<double>(r >> 63);
    }
  }
  return t;
}

std::vector<HostTensor> random_inputs(const Graph& g, uint64_t seed) {
  std::vector<HostTensor> out;
  uint64_t state = seed;
  for (const Value* v : g.inputs()) out.push_back(random_tensor(v->type, splitmix64(state)));
  return out;
}

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size())
    throw IRError("max_abs_diff: shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) + " differ");
  double m = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return kInf;
      continue;
    }
    if (x != y) m = std::max(m, std::fabs(x - y));  // x != y: equal infinities differ by 0
  }
  return m;
}

bool allclose(const HostTensor& a, const HostTensor& b, double rtol, double atol) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return false;
      continue;
    }
    if (x == y) continue;
    if (std::isinf(x) || std::isinf(y)) return false;  // infinities must match exactly
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

}  // namespace ff::interp
