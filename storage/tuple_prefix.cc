// storage/tuple_prefix.cc — see tuple_prefix.h. The type codes are FoundationDB's (tuple.cc).
#include "storage/tuple_prefix.h"

#include <cstdint>

namespace chaise::storage {

std::optional<std::size_t> tuple_prefix_length(std::string_view key, std::size_t elements) {
  constexpr std::uint8_t kBytes = 0x01, kString = 0x02, kIntZero = 0x14;
  constexpr int kSmallIntBytesMax = 8;
  std::size_t pos = 0;
  for (std::size_t i = 0; i < elements; ++i) {
    if (pos >= key.size()) return std::nullopt;
    const auto code = static_cast<std::uint8_t>(key[pos++]);
    if (code == kBytes || code == kString) {
      // Up to the terminating 0x00; 0x00 0xff is an escaped 0x00 inside the value, except as the
      // key's last two bytes: that is a range's end bound (pack(t) + 0xff), whose string ends
      // there (an escape would leave the string unterminated).
      for (;;) {
        const std::size_t nul = key.find('\0', pos);
        if (nul == std::string_view::npos) return std::nullopt;
        pos = nul + 1;
        if (pos + 1 < key.size() && static_cast<std::uint8_t>(key[pos]) == 0xff) {
          ++pos;
          continue;
        }
        break;
      }
    } else if (const int n = static_cast<int>(code) - kIntZero;
               n >= -kSmallIntBytesMax && n <= kSmallIntBytesMax) {
      const auto len = static_cast<std::size_t>(n < 0 ? -n : n);
      if (key.size() - pos < len) return std::nullopt;
      pos += len;
    } else {
      return std::nullopt;
    }
  }
  return pos;
}

}  // namespace chaise::storage
