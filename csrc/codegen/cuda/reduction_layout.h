#pragma once
// The tensors a reduction kernel reads and writes, addressed over its
// domain's kept dims (which row) and reduced dims (which element of the row),
// each list collapsed where every tensor is contiguous across neighbours.
#include <string>
#include <vector>

#include "kernel/group.h"
#include "kernel/reduction_domain.h"

namespace ff::codegen {

// One tensor parameter of a reduction kernel.
struct ReductionAccess {
  const Value* value = nullptr;
  std::string param;  // out0, out1, ... then in0, in1, ...
  DType dtype = DType::f32;
  bool is_output = false;
  bool per_row = false;  // constant along the reduced dims: read or written once per row
  Shape kept, reduced;   // strides over the layout's kept and reduced dims

  // An element output that is unit-stride across rows but not along them
  // (a softmax over the channels of a channels-last tensor written NCHW):
  // written along the row, each store would touch its own sector.
  bool transposed() const { return is_output && !per_row && kept.back() == 1 && reduced.back() != 1; }
  // The Columns form's counterpart: an element output unit-stride along the
  // row but not across the columns, which run along kept dim `across` (a
  // layer norm over W of a channels-last tensor written NCDHW).
  bool along_rows(size_t across) const { return is_output && !per_row && reduced.back() == 1 && kept[across] != 1; }
};

struct ReductionLayout {
  std::vector<ReductionAccess> access;  // outputs first, then tensor inputs: the parameter order
  std::vector<const Value*> scalars;    // scalar inputs: the trailing double parameters s0, s1, ...
  Shape kept, reduced;                  // collapsed extents, outermost first; [1] when there are none
  int main = -1;                        // the input that moves the most bytes along the reduced dims; -1: none does
  int64_t rows = 1, length = 1;

  // Whether the main input is unit-stride along the innermost reduced dim.
  bool inner() const;
  // A kept dim along which the main input is unit-stride, or -1.
  int contiguous_kept() const;
  const ReductionAccess* find(const Value* v) const;
  // The largest offset (in elements) any access reaches, for the index type.
  int64_t max_offset() const;
  // Whether `a` repeats every `step` elements of a row: it varies only along
  // the row's innermost dims (a per-channel weight beside a channels-last
  // input), whose extent divides `step`. A thread whose items lie `step`
  // apart then reads the same elements of `a` for each of them.
  bool repeats_within(const ReductionAccess& a, int64_t step) const;
};

ReductionLayout reduction_layout(const fusion::Group& g, const fusion::ReductionDomain& d);

}  // namespace ff::codegen
