// Database and Transaction forward to their engine's backend; the little that is the same for
// every engine lives here.
#include "storage/database.h"

namespace chaise::storage {

Database::~Database() = default;

Status Database::compact_files(std::string_view begin, std::string_view end) {
  if (begin > end) return Error::inverted_range;
  return backend_->compact_files(KeyRange{std::string(begin), std::string(end)});
}

void Transaction::add(std::string_view key, std::int64_t delta) {
  std::string le(8, '\0');
  auto u = static_cast<std::uint64_t>(delta);
  for (int i = 0; i < 8; ++i, u >>= 8) le[i] = static_cast<char>(u & 0xff);
  b_->atomic_op(key, MutationType::add, le);
}

}  // namespace chaise::storage
