#include "core/db/claims.h"

#include <atomic>

#include "core/security/security.h"
#include "storage/tuple.h"

namespace chaise::core {

using storage::Tuple;

const std::string& node_id() {
  static const std::string id = random_hex32();
  return id;
}

std::string work_owner() {
  static std::atomic<std::uint64_t> next{0};
  return node_id() + '/' + std::to_string(next.fetch_add(1, std::memory_order_relaxed));
}

StorageResult<std::optional<Claim>> read_claim(Transaction& tr, std::string_view key,
                                               storage::Snapshot snapshot) {
  auto v = tr.get(key, snapshot);
  if (!v.ok()) return v.error();
  std::optional<Claim> out;
  if (!v->has_value()) return out;
  auto t = Tuple::unpack(**v);
  const std::string* owner = t ? t->get_string(0) : nullptr;
  const auto written = t ? t->get_int(1) : std::nullopt;
  if (owner == nullptr || !written) return storage::Error::io_error;
  out.emplace(Claim{*owner, *written, std::move(**v)});
  return out;
}

void write_claim(Transaction& tr, std::string_view key, std::string_view owner,
                 std::int64_t now_ms) {
  tr.set(key, Tuple().add(std::string(owner)).add(now_ms).pack());
}

storage::Status drop_claim(Transaction& tr, std::string_view key, std::string_view owner) {
  auto held = read_claim(tr, key, storage::Snapshot::no);
  if (!held.ok()) return held.error();
  if (*held && (*held)->owner == owner) tr.clear(key);
  return {};
}

bool claim_live(const std::optional<Claim>& claim, std::int64_t now_ms, std::int64_t lapse_ms) {
  return claim && now_ms - claim->written_ms < lapse_ms;
}

bool ClaimWatch::lapsed(const Claim& seen, Clock::time_point now) {
  if (seen.raw != last_) {
    last_ = seen.raw;
    since_ = now;
    return false;
  }
  return now - since_ >= lapse_;
}

}  // namespace chaise::core
