#include "core/db/installation.h"

#include "core/db/keyspace.h"

namespace chaise::core {

storage::Result<std::string> installation_value(storage::Database& store, std::string_view name,
                                                const std::function<std::string()>& make) {
  const std::string key =
      keyspace::system().pack(storage::Tuple().add(keyspace::kInstallation).add(std::string(name)));
  std::string value;
  storage::Status s = store.run([&](storage::Transaction& tr) -> storage::Status {
    auto stored = tr.get(key);
    if (!stored.ok()) return stored.error();
    if (stored->has_value()) {
      value = **stored;
      return {};
    }
    value = make();
    tr.set(key, value);
    return {};
  });
  if (!s.ok()) return s.error();
  return value;
}

}  // namespace chaise::core
