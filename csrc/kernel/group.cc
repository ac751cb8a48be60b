#include "kernel/group.h"

namespace ff::fusion {

namespace {
constexpr Group::Kind kKinds[] = {Group::Kind::Pointwise, Group::Kind::Gemm, Group::Kind::Reduction,
                                  Group::Kind::Pool,      Group::Kind::Scan, Group::Kind::Conv};
}  // namespace

std::string_view group_kind_name(Group::Kind kind) {
  switch (kind) {  // no default: a new kind must be named (and listed in kKinds)
    case Group::Kind::Pointwise:
      return "pointwise";
    case Group::Kind::Gemm:
      return "gemm";
    case Group::Kind::Reduction:
      return "reduction";
    case Group::Kind::Pool:
      return "pool";
    case Group::Kind::Scan:
      return "scan";
    case Group::Kind::Conv:
      return "conv";
  }
  return "?";
}

std::optional<Group::Kind> parse_group_kind(std::string_view name) {
  for (Group::Kind k : kKinds)
    if (group_kind_name(k) == name) return k;
  return std::nullopt;
}

}  // namespace ff::fusion
