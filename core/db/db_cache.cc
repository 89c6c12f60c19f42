#include "core/db/db_cache.h"

#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "core/util/json_text.h"

namespace chaise::core {
namespace {

struct ValueEntry {
  std::uint64_t store = 0;       // Transaction::instance_id()
  std::uint64_t generation = 0;  // the metadata generation of the snapshot it was read at
  std::shared_ptr<const void> value;
};

struct ValueCache {
  std::shared_mutex mu;
  std::unordered_map<std::string, ValueEntry> entries;
};

ValueCache& value_cache() {
  static ValueCache c;
  return c;
}

std::string db_key(std::string_view name) { return memo_key("db", name); }

StorageResult<Outcome<OpenedDb>> read_opened(Transaction& tr, std::string_view name) {
  using R = Outcome<OpenedDb>;
  auto r = open_db(tr, name, /*remembered=*/false);
  if (!r.ok()) return r.error();
  if (failed(*r)) return R(std::get<CouchError>(*r));
  OpenedDb out{std::get<DbRef>(std::move(*r)), nullptr};
  auto raw = read_security_json(tr, out.db);
  if (!raw.ok()) return raw.error();
  if (!*raw) {
    out.security = std::make_shared<const SecurityObject>(default_security(true));
    return R(std::move(out));
  }
  const auto parsed = nlohmann::ordered_json::parse(**raw, nullptr, false);
  auto sec = parse_security(parsed);
  if (auto* e = std::get_if<CouchError>(&sec))
    return R(err::unknown_error("stored security object is invalid: " + e->reason));
  out.security = std::make_shared<const SecurityObject>(std::get<SecurityObject>(std::move(sec)));
  return R(std::move(out));
}

}  // namespace

namespace detail {

std::shared_ptr<const void> find_remembered(Transaction& tr, const std::string& key,
                                            Remembering& how) {
  const auto generation = tr.snapshot_metadata_generation();
  if (!generation) return nullptr;
  how.may_fill = true;
  how.generation = *generation;
  ValueCache& c = value_cache();
  std::shared_lock lock(c.mu);
  auto it = c.entries.find(key);
  if (it == c.entries.end() || it->second.store != tr.instance_id() ||
      it->second.generation != *generation)
    return nullptr;
  return it->second.value;
}

void remember(Transaction& tr, const std::string& key, const Remembering& how,
              std::shared_ptr<const void> value) {
  if (!how.may_fill || tr.touches_metadata()) return;
  ValueCache& c = value_cache();
  std::unique_lock lock(c.mu);
  if (c.entries.size() >= kDbCacheEntriesMax) c.entries.clear();
  c.entries[key] = ValueEntry{tr.instance_id(), how.generation, std::move(value)};
}

}  // namespace detail

std::optional<DbRef> remembered_db(Transaction& tr, std::string_view name) {
  detail::Remembering how;
  auto hit = std::static_pointer_cast<const Outcome<OpenedDb>>(
      detail::find_remembered(tr, db_key(name), how));
  if (!hit || failed(*hit)) return std::nullopt;
  return std::get<OpenedDb>(*hit).db;
}

StorageResult<Outcome<OpenedDb>> open_db_with_security(Transaction& tr, std::string_view name) {
  // A 404 is remembered too: creating the database moves the generation.
  auto r = remembered_read<Outcome<OpenedDb>>(tr, db_key(name),
                                              [&](Transaction& t) { return read_opened(t, name); });
  if (!r.ok()) return r.error();
  return **r;
}

}  // namespace chaise::core
