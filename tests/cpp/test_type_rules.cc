// The op registry's dtype facts: PyTorch's promotion tiers, each ResultDType
// rule, the dtype table, and the verifier holding nodes to their rule.
#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/type_rules.h"

namespace ff {
namespace {

using Tier = PromotionOperand::Tier;
PromotionOperand dim(DType d) { return {Tier::Dimensioned, d}; }
PromotionOperand zero(DType d) { return {Tier::ZeroDim, d}; }
PromotionOperand number(DType category) { return PromotionOperand::number_of(category); }

TEST(TypeRules, PromotionTiersFollowPyTorch) {
  EXPECT_EQ(promote_types({}), std::nullopt);
  EXPECT_EQ(promote_types({dim(DType::f16), dim(DType::bf16)}), DType::f32);
  // A 0-d tensor or a number only widens a higher tier of a lower category.
  EXPECT_EQ(promote_types({dim(DType::i32), zero(DType::i64)}), DType::i32);
  EXPECT_EQ(promote_types({dim(DType::i32), zero(DType::f64)}), DType::f64);
  EXPECT_EQ(promote_types({dim(DType::f16), zero(DType::f64)}), DType::f16);
  EXPECT_EQ(promote_types({dim(DType::boolean), number(DType::i64)}), DType::i64);
  EXPECT_EQ(promote_types({dim(DType::i32), number(DType::i64)}), DType::i32);
  EXPECT_EQ(promote_types({dim(DType::i64), number(DType::f64)}), DType::f32);  // the default float
  EXPECT_EQ(promote_types({dim(DType::f16), number(DType::f64)}), DType::f16);
  EXPECT_EQ(promote_types({zero(DType::i32), number(DType::f64)}), DType::f32);
  EXPECT_EQ(promote_types({number(DType::i64), number(DType::f64)}), DType::f32);
  EXPECT_EQ(promote_types({zero(DType::boolean), number(DType::boolean)}), DType::boolean);
}

TEST(TypeRules, EachResultRule) {
  PromotionOperands ints{dim(DType::i64), dim(DType::i64)};
  EXPECT_EQ(result_dtype(Op::Add, ints), DType::i64);
  EXPECT_EQ(result_dtype(Op::Div, ints), DType::f32);                    // Float: true division
  EXPECT_EQ(result_dtype(Op::Sigmoid, {dim(DType::f16)}), DType::f16);  // Float keeps floating types
  EXPECT_EQ(result_dtype(Op::Lt, {dim(DType::f16), number(DType::f64)}), DType::boolean);
  EXPECT_EQ(common_dtype(Op::Lt, {dim(DType::i32), number(DType::f64)}), DType::f32);
  EXPECT_EQ(result_dtype(Op::LogicalAnd, ints), DType::boolean);
  EXPECT_EQ(result_dtype(Op::Argmax, {dim(DType::f16)}), DType::i64);
  EXPECT_EQ(result_dtype(Op::LayerNorm, {dim(DType::bf16), dim(DType::f32), dim(DType::f32)}), DType::bf16);
  EXPECT_EQ(result_dtype(Op::Cast, {dim(DType::f32)}), std::nullopt);  // Declared
  // where's condition takes no part; a left-out operand neither.
  EXPECT_EQ(result_dtype(Op::Where, {dim(DType::boolean), dim(DType::i32), std::nullopt}), DType::i32);
  EXPECT_EQ(result_dtype(Op::Mul, {dim(DType::i64), std::nullopt}), DType::i64);
  EXPECT_FALSE(promotes_operand(Op::Where, 0));
  EXPECT_TRUE(promotes_operand(Op::Where, 1));
  EXPECT_TRUE(promotes_operand(Op::Add, 0));
}

TEST(TypeRules, DTypeTableRoundTrips) {
  for (size_t i = 0; i < kNumDTypes; ++i) {
    const DTypeInfo& info = dtype_table()[i];
    EXPECT_EQ(parse_dtype(info.name), info.dtype);
    EXPECT_EQ(&dtype_info(info.dtype), &info);
    EXPECT_FALSE(info.torch.empty());
    EXPECT_EQ(info.aten.substr(0, 5), "at::k");
  }
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_info(DType::boolean).name, "bool");
}

TEST(TypeRules, OpTableRowsParse) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    EXPECT_EQ(parse_op(info.name), info.op) << info.name;
    EXPECT_NE(result_dtype_name(info.result_dtype), "?");
  }
  EXPECT_EQ(op_info(Op::Mul).aten, "mul.Tensor mul.Scalar");
  EXPECT_EQ(op_info(Op::Eq).result_dtype, ResultDType::Compare);
}

void expect_verify_error(const char* text, const std::string& what) {
  auto g = parse(text);
  try {
    verify(*g);
    FAIL() << "verified: " << text;
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(TypeRules, VerifierHoldsNodesToTheirRule) {
  auto ok = parse(R"(graph @g(%x: i64[4], %b: bool[4], %h: f16[4]) {
  %0 = mul(%x, 0.5) : f32[4]
  %1 = add(%b, 1) : i64[4]
  %2 = div(%x, %x) : f32[4]
  %3 = eq(%b, 2) : bool[4]
  %4 = where(%b, %h, 1.5) : f16[4]
  %5 = argmax(%h) {dim=0, keepdim=false} : i64[]
  %6 = cast(%h) : i32[4]
  return %0, %1, %2, %3, %4, %5, %6
})");
  EXPECT_NO_THROW(verify(*ok));
  expect_verify_error(R"(graph @g(%x: i64[4]) {
  %0 = sigmoid(%x) : f64[4]
  return %0
})", "does not match the op's rule f32[4]");
  expect_verify_error(R"(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = lt(%x, %y) : f32[4]
  return %0
})", "op's rule bool[4]");
  expect_verify_error(R"(graph @g(%x: f16[4]) {
  %0 = amax(%x) {dims=[0], keepdim=false} : f32[]
  return %0
})", "op's rule f16[]");
}

}  // namespace
}  // namespace ff
