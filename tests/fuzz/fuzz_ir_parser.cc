// Fuzz target of the IR text form: parse, verify and, when both accept the
// input, print -> parse -> verify -> print must give the same text. The only
// acceptable way to reject an input is a thrown ff::IRError; any other
// exception, a crash, a sanitizer report or a round trip that changes the
// text is a bug (the process aborts, so both drivers report it).
//
// Drivers: libFuzzer (clang, tests/fuzz/CMakeLists.txt built on its own) and
// standalone_main.cc (a deterministic mutation loop CTest runs).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ir/graph.h"

namespace {

// Far larger than any golden file; beyond it the parser's quadratic name
// lookup only makes the fuzzer slow, not more thorough.
constexpr size_t kMaxInputBytes = 16 * 1024;

[[noreturn]] void round_trip_bug(const char* what, const std::string& printed, const std::string& detail) {
  std::fprintf(stderr, "fuzz_ir_parser: %s\n--- printed graph:\n%s--- detail:\n%s\n", what, printed.c_str(),
               detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<ff::Graph> graph;
  try {
    graph = ff::parse(text);
    ff::verify(*graph);
  } catch (const ff::IRError&) {
    return 0;  // rejected with a message: the expected outcome for bad input
  }
  const std::string printed = ff::print(*graph);
  std::unique_ptr<ff::Graph> again;
  try {
    again = ff::parse(printed);
    ff::verify(*again);
  } catch (const ff::IRError& e) {
    round_trip_bug("the printed form of a valid graph is rejected", printed, e.what());
  }
  const std::string reprinted = ff::print(*again);
  if (reprinted != printed) round_trip_bug("print(parse(print(g))) != print(g)", printed, reprinted);
  return 0;
}
