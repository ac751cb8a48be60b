// round_conv_operands: rounds the operands of each 1xTF32 convolution an
// implicit-GEMM kernel computes (conv_engine's choice) to tf32 (round_tf32)
// in the kernels that write them, so that the conv kernel's tensor cores read
// them as they are.
//
// Tensor cores read an f32 as tf32 by dropping its low 13 bits. Truncation
// biases every product toward zero (1.5-3.2x eager's error against fp64 on the
// suite's convs on an H100); rounded operands give eager's (cuDNN rounds).
// Rounding inside the conv kernel costs a pass over every shared-memory tile
// (about 25 % of the kernel); rounding where the operand is written costs
// nothing: the input's channels-last copy, a pointwise op that makes it, the
// weight's prepared copy. So an operand is rounded only where its producer is
// a pointwise op read by nothing else (what conv_engine leaves before a conv
// it made channels-last); the kernel for a conv with both operands rounded
// reads them from shared memory as loaded (codegen/cuda/sm90_ss_mainloop.h),
// others keep rounding in the kernel. A cuDNN call on rounded operands (the
// kernel's library form) gives the same result: its TF32 math rounds them to
// the same values.
//
// Runs after conv_engine.
#include "kernel/conv.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

class RoundConvOperands : public Pass {
 public:
  std::string_view name() const override { return "round_conv_operands"; }

  bool run(Graph& g) override {
    std::vector<Node*> convs;  // collected first: inserting nodes moves the node list
    for (auto& n : g.nodes()) {
      if (n->op != Op::Convolution || conv_engine(*n) != ConvEngine::implicit_gemm) continue;
      const auto spec = conv_spec(*n);
      if (spec && spec->dtype == DType::f32 && spec->tf32 && fusion::match_conv_kernel(*n)) convs.push_back(n.get());
    }
    bool changed = false;
    for (Node* n : convs) {
      for (size_t i : {0, 1}) {
        Value* v = n->input(i);
        const Node* p = v->producer;
        if (p == nullptr || p->op == Op::RoundTf32 || op_kind(p->op) != OpKind::Pointwise || g.users(v).size() != 1)
          continue;
        n->operands[i] = Operand::of(g.insert_before(n, Op::RoundTf32, {Operand::of(v)}, {v->type})->result());
        changed = true;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_round_conv_operands() { return std::make_unique<RoundConvOperands>(); }

}  // namespace ff::passes
