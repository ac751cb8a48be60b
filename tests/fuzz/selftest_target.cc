// A fuzz target with a planted bug, to check that standalone_main.cc finds and
// reports what a real target's bug would look like: an input containing
// "2147483648" (a boundary number the mutator inserts) throws a non-IRError
// exception, or aborts, as $FF_FUZZ_SELFTEST says ("throw" or "abort").
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.find("2147483648") == std::string_view::npos) return 0;
  const char* mode = std::getenv("FF_FUZZ_SELFTEST");
  if (mode != nullptr && std::string_view(mode) == "abort") std::abort();
  throw std::out_of_range("planted bug");
}
