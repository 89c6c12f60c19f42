// storage/write_checks.cc — see write_checks.h.
#include "storage/write_checks.h"

#include <cstdint>

#include "storage/transaction.h"

namespace chaise::storage {

Error check_written_key(std::string_view key) {
  if (key.size() > kKeySizeMax) return Error::key_too_large;
  if (!key.empty() && static_cast<std::uint8_t>(key[0]) == 0xff) {
    return Error::key_outside_legal_range;
  }
  return Error::success;
}

bool versionstamp_template_ok(std::string_view tmpl) {
  if (tmpl.size() < 4 + kVersionstampSize) return false;
  std::uint32_t off = 0;
  for (int i = 3; i >= 0; --i)
    off = (off << 8) | static_cast<std::uint8_t>(tmpl[tmpl.size() - 4 + i]);
  return static_cast<std::size_t>(off) + kVersionstampSize <= tmpl.size() - 4;
}

}  // namespace chaise::storage
