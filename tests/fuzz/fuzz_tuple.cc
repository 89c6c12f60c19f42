// libFuzzer target: the tuple layer decoder (storage/tuple), which reads every key and value of
// the store. unpack() must accept only canonical encodings: whatever it accepts packs back to the
// same bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "storage/tuple.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto t = chaise::storage::Tuple::unpack(bytes)) {
    if (t->pack() != bytes) std::abort();
  }
  return 0;
}
