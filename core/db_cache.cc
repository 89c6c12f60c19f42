#include "core/db_cache.h"

#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "core/json_text.h"

namespace chaise::core {
namespace {

struct Entry {
  std::uint64_t store = 0;       // Transaction::instance_id()
  std::uint64_t generation = 0;  // the even metadata generation it was read under
  OpenedDb opened;
};

struct Cache {
  std::shared_mutex mu;
  std::unordered_map<std::string, Entry> entries;
};

Cache& cache() {
  static Cache c;
  return c;
}

StorageResult<Outcome<OpenedDb>> read_opened(Transaction& tr, std::string_view name) {
  using R = Outcome<OpenedDb>;
  auto r = open_db(tr, name);
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
    return R(CouchError{500, "unknown_error", "stored security object is invalid: " + e->reason});
  out.security = std::make_shared<const SecurityObject>(std::get<SecurityObject>(std::move(sec)));
  return R(std::move(out));
}

}  // namespace

StorageResult<Outcome<OpenedDb>> open_db_with_security(Transaction& tr, std::string_view name) {
  using R = Outcome<OpenedDb>;
  Cache& c = cache();
  // The generation before the snapshot; the snapshot; the generation again. Equal and even: no
  // metadata write became visible in between, so what this snapshot shows is what every
  // snapshot shows until the generation moves.
  // (A snapshot taken earlier may predate the first read of the generation: not remembered.)
  const bool fresh_snapshot = !tr.has_read_version();
  const std::uint64_t before = tr.metadata_generation();
  if (auto v = tr.get_read_version(); !v.ok()) return v.error();
  const std::uint64_t after = tr.metadata_generation();
  const std::string key(name);
  {
    std::shared_lock lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end() && it->second.store == tr.instance_id() &&
        it->second.generation == after && after % 2 == 0)
      return R(it->second.opened);
  }
  auto read = read_opened(tr, name);
  if (!read.ok() || failed(*read)) return read;
  if (fresh_snapshot && before == after && after % 2 == 0) {
    std::unique_lock lock(c.mu);
    if (c.entries.size() >= kDbCacheEntriesMax) c.entries.clear();
    c.entries[key] = Entry{tr.instance_id(), after, std::get<OpenedDb>(*read)};
  }
  return read;
}

}  // namespace chaise::core
