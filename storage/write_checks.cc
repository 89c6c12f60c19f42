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

Error check_written_value(std::string_view value) {
  return value.size() > kValueSizeMax ? Error::value_too_large : Error::success;
}

Error check_cleared_range(std::string_view begin, std::string_view end) {
  if (begin > end) return Error::inverted_range;
  if (begin.size() > kKeySizeMax || end.size() > kKeySizeMax) return Error::key_too_large;
  if (begin >= kKeyspaceEnd || end > kKeyspaceEnd) return Error::key_outside_legal_range;
  return Error::success;
}

Error check_value_template(std::string_view value_template) {
  if (!versionstamp_template_ok(value_template)) return Error::invalid_option_value;
  return check_written_value(value_template.substr(0, value_template.size() - 4));
}

}  // namespace chaise::storage
