// The reduction domain analysis (kernel/reduction_domain.h): which values are
// per-row, the domain dims each value runs along, the reduction levels, and
// the groups it refuses. (tests/golden/fusion/ covers the scheduler's groups.)
#include <gtest/gtest.h>

#include "kernel/reduction_domain.h"

namespace ff {
namespace {

struct Analyzed {
  std::unique_ptr<Graph> g;
  std::optional<fusion::ReductionDomain> d;
  std::string why;
  const Value* v(const std::string& name) const { return g->find_value(name); }
};

// Analyzes every node of `text` as one group.
Analyzed analyze(const std::string& text) {
  Analyzed a{parse(text), std::nullopt, ""};
  verify(*a.g);
  std::vector<Node*> nodes;
  for (auto& n : a.g->nodes()) nodes.push_back(n.get());
  a.d = fusion::analyze_reduction_group(nodes, &a.why);
  return a;
}

TEST(ReductionDomain, RmsNormRowValuesAndDims) {
  auto a = analyze(R"(graph @rms(%x: f32[4,6,32], %w: f32[32]) {
  %0 = mul(%x, %x) : f32[4,6,32]
  %1 = mean(%0) {dims=[2], keepdim=true} : f32[4,6,1]
  %2 = add(%1, 1e-06) : f32[4,6,1]
  %3 = rsqrt(%2) : f32[4,6,1]
  %4 = mul(%x, %3) : f32[4,6,32]
  %5 = mul(%4, %w) : f32[4,6,32]
  return %5
})");
  ASSERT_TRUE(a.d) << a.why;
  EXPECT_EQ(a.d->shape, (Shape{4, 6, 32}));
  EXPECT_EQ(a.d->reduced, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(a.d->rows(), 24);
  EXPECT_EQ(a.d->length(), 32);
  for (const char* row : {"1", "2", "3"}) EXPECT_TRUE(a.d->per_row.count(a.v(row))) << row;
  for (const char* full : {"0", "4", "5", "x", "w"}) EXPECT_FALSE(a.d->per_row.count(a.v(full))) << full;
  EXPECT_EQ(a.d->dims.at(a.v("3")), (std::vector<int>{0, 1, -1}));
  EXPECT_EQ(a.d->dims.at(a.v("w")), (std::vector<int>{2}));
  EXPECT_EQ(a.d->strides(a.v("w")), (Shape{0, 0, 1}));
  EXPECT_EQ(a.d->levels, 1);
  EXPECT_TRUE(a.d->covers(a.v("5")) && a.d->covers(a.v("3")));
  EXPECT_FALSE(a.d->covers(a.v("w")));  // a per-element value that does not span the rows
}

TEST(ReductionDomain, NonKeepdimResultsKeepTheirOwnDims) {
  // The per-row values are [4, 5] (dims 0 and 2 of the domain), and the
  // running average reads a per-row input of the same shape.
  auto a = analyze(R"(graph @g(%x: f32[4,3,5], %r: f32[4,5]) {
  %0 = var(%x) {correction=0, dims=[1], keepdim=false} : f32[4,5]
  %1 = mean(%x) {dims=[1], keepdim=false} : f32[4,5]
  %2 = mul(%r, 0.9) : f32[4,5]
  %3 = add(%2, %1) : f32[4,5]
  return %0, %3
})");
  ASSERT_TRUE(a.d) << a.why;
  EXPECT_EQ(a.d->dims.at(a.v("1")), (std::vector<int>{0, 2}));
  EXPECT_EQ(a.d->dims.at(a.v("r")), (std::vector<int>{0, 2})) << "from the node that reads %2";
  EXPECT_TRUE(a.d->per_row.count(a.v("2")) && a.d->per_row.count(a.v("3")));
}

TEST(ReductionDomain, SecondLevelReadsTheFirstsResults) {
  auto a = analyze(R"(graph @softmax(%x: f32[8,16]) {
  %0 = amax(%x) {dims=[1], keepdim=true} : f32[8,1]
  %1 = sub(%x, %0) : f32[8,16]
  %2 = exp(%1) : f32[8,16]
  %3 = sum(%2) {dims=[1], keepdim=true} : f32[8,1]
  %4 = div(%2, %3) : f32[8,16]
  return %4
})");
  ASSERT_TRUE(a.d) << a.why;
  EXPECT_EQ(a.d->levels, 2);
  EXPECT_EQ(a.d->level.at(a.v("0")->producer), 1);
  EXPECT_EQ(a.d->level.at(a.v("3")->producer), 2);
  EXPECT_EQ(a.d->row_level(a.v("4")), 2);
}

TEST(ReductionDomain, RefusesWhatIsNotOneDomain) {
  // Reductions over different dims of one tensor.
  auto a = analyze(R"(graph @g(%x: f32[4,8]) {
  %0 = sum(%x) {dims=[0], keepdim=false} : f32[8]
  %1 = sum(%x) {dims=[1], keepdim=false} : f32[4]
  return %0, %1
})");
  EXPECT_FALSE(a.d);
  EXPECT_NE(a.why.find("reduces another domain"), std::string::npos) << a.why;
  // A non-keepdim result (dims 0 and 2 of the domain) that the IR broadcasts
  // against the domain right-aligned (onto dims 1 and 2): its dims would not
  // line up with the ones it came from.
  auto b = analyze(R"(graph @g(%x: f32[3,3,3]) {
  %0 = sum(%x) {dims=[1], keepdim=false} : f32[3,3]
  %1 = mul(%x, %0) : f32[3,3,3]
  return %1
})");
  EXPECT_FALSE(b.d);
  EXPECT_NE(b.why.find("read along other dims"), std::string::npos) << b.why;
  // A matmul.
  auto c = analyze(R"(graph @g(%x: f32[4,6], %y: f32[6,2]) {
  %0 = sum(%x) {dims=[1], keepdim=true} : f32[4,1]
  %1 = mm(%x, %y) : f32[4,2]
  return %0, %1
})");
  EXPECT_FALSE(c.d);
  EXPECT_NE(c.why.find("cannot be part of a reduction kernel"), std::string::npos) << c.why;
}

TEST(ReductionDomain, KernelReductionsAreFloatingWithElements) {
  auto g = parse(R"(graph @g(%f: f32[4,8], %i: i64[4,8], %b: bool[4,8], %e: f32[4,0]) {
  %0 = sum(%f) {dims=[1], keepdim=false} : f32[4]
  %1 = sum(%i) {dims=[1], keepdim=false} : i64[4]
  %2 = any(%b) {dims=[1], keepdim=false} : bool[4]
  %3 = argmax(%f) {dim=1} : i64[4]
  %4 = sum(%e) {dims=[1], keepdim=false} : f32[4]
  return %0, %1, %2, %3, %4
})");
  verify(*g);
  std::vector<bool> got;
  for (auto& n : g->nodes()) got.push_back(fusion::is_kernel_reduction(*n));
  EXPECT_EQ(got, (std::vector<bool>{true, false, true, true, false}));
}

}  // namespace
}  // namespace ff
