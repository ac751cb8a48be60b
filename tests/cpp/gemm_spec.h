#pragma once
// Shared by the GEMM tests: the GemmSpec of the one matmul in an IR text, and
// a compile with f32 GEMM kernels for a target arch.
#include <optional>
#include <stdexcept>
#include <string>

#include "kernel/gemm.h"
#include "ir/graph.h"
#include "pipeline/compile.h"

namespace ff::testing {

// match_gemm of the graph's only matmul node (nullopt: no GEMM kernel covers
// it); throws if the text holds no matmul. The spec holds numbers only, so it
// outlives the parsed graph.
inline std::optional<fusion::GemmSpec> gemm_spec_of(const std::string& text) {
  auto g = parse(text);
  verify(*g);
  for (auto& n : g->nodes())
    if (op_kind(n->op) == OpKind::Matmul) return fusion::match_gemm(*n);
  throw std::runtime_error("no matmul");
}

inline CompiledGraph compile_for(const std::string& text, int arch, bool tf32 = false) {
  CompileOptions opts;
  opts.gemm_dtypes = {DType::f32};
  opts.arch = arch;
  opts.precision = tf32 ? Precision::tf32 : Precision::fp32;
  return compile_graph(text, opts);
}

}  // namespace ff::testing
