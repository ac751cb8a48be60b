#include "codegen/cuda/reduction.h"

#include "codegen/cuda/reduction_emit.h"

namespace ff::codegen {

std::string ReductionStrategy::describe() const {
  std::string r;
  if (form == Form::Rows) {
    r = threads >= 64
            ? "a block of " + std::to_string(threads) + " threads per row"
            : std::to_string(threads) + " thread(s) per row, " + std::to_string(block / threads) + " rows per block";
    r += ", " + std::to_string(vector) + " element(s) per load";
  } else {
    r = "columns: " + std::to_string(vector) + " adjacent row(s) per thread, " + std::to_string(block / threads) +
        " threads across rows x " + std::to_string(threads) + " along the reduced extent";
  }
  if (staged) r += ", transposed outputs staged in shared memory";
  if (shared_items > 0)
    r += ", inputs held across passes in registers and shared memory (" + std::to_string(shared_items) +
         " loads per thread)";
  else
    r += persistent ? ", inputs held in registers across passes"
                    : ", inputs streamed (" + std::to_string(unroll) + " loads in flight)";
  return r;
}

KernelSource generate_reduction(const fusion::Group& g, const fusion::ReductionDomain& d, const ReductionLayout& l,
                                const ReductionStrategy& s, int id) {
  ReductionWriter w(g, d, l, s, id, s.form == ReductionStrategy::Form::Columns ? s.vector : 1);
  return s.form == ReductionStrategy::Form::Rows ? generate_reduction_rows(w) : generate_reduction_columns(w);
}

}  // namespace ff::codegen
