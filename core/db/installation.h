// core/db/installation.h — values every server of one installation shares, kept in the store
// rather than in a node's configuration, so that a node started on the same store (another
// Chaise process on the same FoundationDB cluster) agrees with the others without being told.
//
//   (kSystem, kInstallation, Name) = the value (bytes)
//
// A value is made once, by whichever node first asks for it; a race between two nodes making it
// is settled by the store (the read conflicts), and both then answer the winner's value.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "storage/database.h"

namespace chaise::core {

// The installation's value `name`, made with `make()` and stored when there is none. Storage
// errors after the store's retries come back as the error.
storage::Result<std::string> installation_value(storage::Database& store, std::string_view name,
                                                const std::function<std::string()>& make);

// The names in use.
inline constexpr std::string_view kCookieSecretName = "cookie_secret";  // [chttpd_auth] secret
inline constexpr std::string_view kServerUuidName = "server_uuid";      // GET / "uuid"

}  // namespace chaise::core
