// The registry of passes by name. Adding a pass: write passes/<name>.cc with a
// factory function, declare it here and add a row to kPasses.
#include "passes/pass.h"

namespace ff::passes {

std::unique_ptr<Pass> make_canonicalize();              // canonicalize.cc
std::unique_ptr<Pass> make_cse();                       // cse.cc
std::unique_ptr<Pass> make_dce();                       // dce.cc
std::unique_ptr<Pass> make_broadcast_matmul_operand();  // broadcast_matmul_operand.cc
std::unique_ptr<Pass> make_matmul_sum_to_gemv();        // matmul_sum_to_gemv.cc
std::unique_ptr<Pass> make_gemv_as_reduction();         // gemv_as_reduction.cc
std::unique_ptr<Pass> make_scale_matmul_operand();      // scale_matmul_operand.cc
std::unique_ptr<Pass> make_broadcast_bmm_to_mm();       // broadcast_bmm_to_mm.cc
std::unique_ptr<Pass> make_conv_bias_epilogue();        // conv_bias_epilogue.cc
std::unique_ptr<Pass> make_conv_precision();            // conv_precision.cc
std::unique_ptr<Pass> make_conv_engine();               // conv_engine.cc
std::unique_ptr<Pass> make_round_conv_operands();       // round_conv_operands.cc
std::unique_ptr<Pass> make_split_gemm_reduction();      // split_gemm_reduction.cc
std::unique_ptr<Pass> make_split_gemm_k();              // split_gemm_k.cc
std::unique_ptr<Pass> make_split_long_reduction();      // split_long_reduction.cc
std::unique_ptr<Pass> make_decompose_long_norm();       // decompose_long_norm.cc
std::unique_ptr<Pass> make_recompute_pointwise();       // recompute_pointwise.cc
std::unique_ptr<Pass> make_pointwise_before_view();     // pointwise_before_view.cc
std::unique_ptr<Pass> make_view_before_pointwise();     // view_before_pointwise.cc
std::unique_ptr<Pass> make_reduction_before_view();     // reduction_before_view.cc
std::unique_ptr<Pass> make_region_before_view();        // region_before_view.cc
std::unique_ptr<Pass> make_compose_pools();             // compose_pools.cc
std::unique_ptr<Pass> make_drop_unit_pool_dim();        // drop_unit_pool_dim.cc
std::unique_ptr<Pass> make_reverse_scan();              // reverse_scan.cc

namespace {
struct Entry {
  const char* name;
  std::unique_ptr<Pass> (*make)();
};
const Entry kPasses[] = {
    {"canonicalize", make_canonicalize},
    {"cse", make_cse},
    {"dce", make_dce},
    {"broadcast_matmul_operand", make_broadcast_matmul_operand},
    {"matmul_sum_to_gemv", make_matmul_sum_to_gemv},
    {"gemv_as_reduction", make_gemv_as_reduction},
    {"scale_matmul_operand", make_scale_matmul_operand},
    {"broadcast_bmm_to_mm", make_broadcast_bmm_to_mm},
    {"conv_bias_epilogue", make_conv_bias_epilogue},
    {"conv_precision", make_conv_precision},
    {"conv_engine", make_conv_engine},
    {"round_conv_operands", make_round_conv_operands},
    {"split_gemm_reduction", make_split_gemm_reduction},
    {"split_gemm_k", make_split_gemm_k},
    {"split_long_reduction", make_split_long_reduction},
    {"decompose_long_norm", make_decompose_long_norm},
    {"recompute_pointwise", make_recompute_pointwise},
    {"pointwise_before_view", make_pointwise_before_view},
    {"view_before_pointwise", make_view_before_pointwise},
    {"reduction_before_view", make_reduction_before_view},
    {"region_before_view", make_region_before_view},
    {"compose_pools", make_compose_pools},
    {"drop_unit_pool_dim", make_drop_unit_pool_dim},
    {"reverse_scan", make_reverse_scan},
};
}  // namespace

std::unique_ptr<Pass> create_pass(std::string_view name) {
  for (const Entry& e : kPasses)
    if (name == e.name && e.make) return e.make();
  std::string known;
  for (auto& n : pass_names()) known += " " + n;
  throw IRError("unknown pass '" + std::string(name) + "'; known passes:" + known);
}

std::vector<std::string> pass_names() {
  std::vector<std::string> out;
  for (const Entry& e : kPasses)
    if (e.make) out.push_back(e.name);
  return out;
}

// conv_precision first: it decides on the convolutions as captured.
std::vector<std::string> default_pipeline() {
  return {"conv_precision",
          "canonicalize",
          "drop_unit_pool_dim",
          "reverse_scan",
          "compose_pools",
          "broadcast_matmul_operand",
          "matmul_sum_to_gemv",
          "gemv_as_reduction",
          "scale_matmul_operand",
          "broadcast_bmm_to_mm",
          "conv_bias_epilogue",
          "conv_engine",
          "round_conv_operands",
          "decompose_long_norm",
          "region_before_view",
          "reduction_before_view",
          "view_before_pointwise",
          "split_long_reduction",
          "pointwise_before_view",
          "cse",
          "dce"};
}

}  // namespace ff::passes
