// libFuzzer target: sequence strings clients send back in `since` (core/sequence). A parsed
// sequence prints as a string that parses to the same sequence, with the same N (the zero
// sequence prints as "0", without the N it may have been given).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/db/sequence.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto seq = chaise::core::Sequence::parse(text)) {
    auto again = chaise::core::Sequence::parse(seq->str());
    if (!again || *again != *seq) std::abort();
    if (!seq->is_zero() && again->count != seq->count) std::abort();
  }
  return 0;
}
