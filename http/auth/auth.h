// http/auth/auth.h — who sent a request: HTTP Basic, the AuthSession cookie and proxy headers, as
// CouchDB 3.5's chttpd_auth / couch_httpd_auth do it, against the server admins of [admins] and
// the user documents of _users.
//
// The Authenticator is shared by every io thread. It re-reads its settings from the config when the
// config's generation changes, caches verified Basic credentials (PBKDF2 costs ~0.3 s at CouchDB's
// 600,000 iterations) keyed by a salted SHA-256 of the password and checked against the user doc's
// current revision on every use, and throttles failed logins per user and per address.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "core/db/txid_janitor.h"
#include "core/security/security.h"
#include "core/util/error.h"
#include "http/auth/cors.h"
#include "http/auth/jwt.h"
#include "http/transport/message.h"
#include "storage/database.h"

namespace chaise::http {

// The [chttpd_auth] / [chttpd] / [admins] settings in force.
struct AuthSettings {
  std::unordered_map<std::string, core::PasswordHash> admins;
  bool admin_party = false;  // --admin-party and no admin configured: everyone is a server admin
  bool require_valid_user = false;
  std::string secret;  // empty: cookie auth disabled until the first login creates one
  std::int64_t timeout_s = 600;
  bool allow_persistent_cookies = true;
  std::string same_site;  // "", "Strict", "Lax" or "None"
  std::string cookie_domain;
  std::vector<std::string> hash_algorithms = {"sha256", "sha"};
  // cookie_authentication_handler and default_authentication_handler (Basic) in [chttpd]
  // authentication_handlers; both when it is not set.
  bool cookie_enabled = true;
  bool basic_enabled = true;
  bool proxy_enabled = false;
  bool jwt_enabled = false;  // jwt_authentication_handler in [chttpd] authentication_handlers
  JwtSettings jwt;
  bool proxy_use_secret = false;
  std::string x_auth_username = "X-Auth-CouchDB-UserName";
  std::string x_auth_roles = "X-Auth-CouchDB-Roles";
  std::string x_auth_token = "X-Auth-CouchDB-Token";
  std::vector<std::string> public_fields;
  core::UserDbRules user_rules;
  bool upgrade_hash_on_auth = true;
  CorsConfig cors;  // re-read with the rest when the config changes
};

AuthSettings auth_settings(const config::Sections& values, bool admin_party);

// upgrade_hash_on_auth (couch_password_hasher): a user who just logged in with a password whose
// stored hash was made with other settings than new ones get. Holds the password: keep it only as
// long as it takes to hand it to schedule_hash_upgrade.
struct HashUpgrade {
  std::string name;
  std::string password;
  std::string rev;  // the user doc's revision the password was checked against
};

// The outcome of authenticating one request.
struct AuthResult {
  core::UserCtx user;
  // "default" (Basic), "cookie" or "proxy"; empty for anonymous.
  std::string handler;
  // A Set-Cookie header value to add to the response (a refreshed AuthSession).
  std::optional<std::string> set_cookie;
  // Set when the request must be answered with this error instead (bad credentials, malformed
  // header or cookie, require_valid_user).
  std::optional<core::CouchError> error;
  std::optional<HashUpgrade> upgrade;  // Basic only: give it to schedule_hash_upgrade
  // The store's read version the credentials were read at (none: nothing read): the request's
  // own reads may start at it (Call::read_version) instead of asking for another.
  storage::SeenReadVersion read_version;
};

// Who is on the other end of the connection: its address (for the failed-login throttle) and
// whether it came over TLS (the AuthSession cookie is then `Secure`, as CouchDB sets it on https).
struct Client {
  std::string address;
  bool secure = false;
};

class Authenticator {
 public:
  // `config` and `store` outlive the Authenticator. `admin_party` is honoured only while no admin
  // is configured.
  Authenticator(config::Config& config, storage::Database& store, bool admin_party);

  // What a request's `Authorization: Basic` header presents, decoded once per request. No name:
  // no Basic header, no colon, or CouchDB's "_:_" (anonymous); any other scheme (PouchDB's
  // `Basic: …` included) is anonymous too.
  struct Presented {
    std::optional<std::string> name;
    std::string password;
    bool invalid_base64 = false;
    std::string digest;  // the password's cache digest (see CacheEntry); empty without a name
  };
  Presented presented(const Request& req) const;

  std::shared_ptr<const AuthSettings> settings() const;
  // `basic`: the request's presented() credential.
  AuthResult authenticate(const Request& req, const Client& client, const Presented& basic) const;
  // Whether authenticate() may hash a password (PBKDF2, tens of milliseconds at CouchDB's
  // iteration count): the request carries a Basic credential not verified since the server
  // started. The router runs such requests' authentication on its worker pool.
  bool may_hash_password(const Presented& basic) const;

  // POST /_session: name and password checked; on success the user and the Set-Cookie value.
  struct Login {
    std::optional<core::UserCtx> user;      // nullopt: wrong name or password
    std::string set_cookie;                 // AuthSession, or a clearing cookie after a failure
    std::optional<core::CouchError> error;  // throttled, or the store did not answer
    std::optional<HashUpgrade> upgrade;     // give it to schedule_hash_upgrade
  };
  Login login(std::string_view name, std::string_view password, const Client& client) const;
  // The Set-Cookie value that removes the AuthSession cookie.
  std::string clear_cookie(const Client& client) const;
  // The names CouchDB lists in GET /_session info.authentication_handlers.
  std::vector<std::string> handler_names() const;

  // Rewrites the user doc with the password hashed as new passwords are, its salt kept, when the
  // doc is still at u.rev (else a later write decided). Blocks for a PBKDF2 and a commit: run it
  // off the io threads (schedule_hash_upgrade). Hands the commit's transaction id to `janitor`.
  void upgrade_hash(const HashUpgrade& u, core::TxIdJanitor* janitor) const;

  config::Config& config() const { return config_; }
  storage::Database& store() const { return store_; }

 private:
  struct Creds {
    core::UserCtx user;
    std::optional<core::PasswordHash> hash;
    std::string salt;
    std::string rev;  // the user doc's rev; "" for a config admin without a user doc
    // The read version lookup read at (none: it read nothing); never remembered with the
    // credentials.
    storage::SeenReadVersion read_version;
  };
  // name's credentials: an [admins] entry (with its user document's roles added, when the store
  // answers within kAdminRolesTime: an admin needs the store for nothing else), else its user
  // document. The store's error for a name that is no admin: it cannot be told from a wrong one.
  storage::Result<std::optional<Creds>> lookup(const AuthSettings& s, std::string_view name) const;
  static constexpr std::chrono::milliseconds kAdminRolesTime{1000};
  // The credentials in name's _users document as of `tr`, or nullopt when there is none.
  static storage::Result<std::optional<Creds>> read_user_creds(storage::Transaction& tr,
                                                               std::string_view name);
  // `digest`: the password's cache digest when the caller has it, else empty.
  bool check_password(const AuthSettings& s, const Creds& creds, std::string_view name,
                      std::string_view password, std::string_view digest) const;
  // Name and password as Basic and POST /_session check them: the lockout first, then the
  // credentials (a failure counts towards the lockout). nullopt with `refused` unset: a wrong
  // name or password; with it set, the answer instead: 403 for the lockout, or the store's error
  // when it could not tell (which counts as no failure).
  std::optional<Creds> verify_login(const AuthSettings& s, std::string_view name,
                                    std::string_view password, std::string_view peer,
                                    std::optional<core::CouchError>& refused,
                                    std::string_view digest = {}) const;
  std::string password_digest(std::string_view password) const;
  std::string make_cookie(const Client& client, const AuthSettings& s, std::string_view name,
                          std::string_view salt, std::int64_t now) const;
  std::string ensure_secret() const;
  // Failed-login throttle: true when `key` failed too often recently.
  bool throttled(const std::string& key) const;
  void record_failure(const std::string& key) const;
  // After a successful password check: the upgrade to schedule, if the stored hash needs one and
  // no upgrade of this user is under way (at most kUpgradesMax at a time).
  std::optional<HashUpgrade> claim_upgrade(const AuthSettings& s, const Creds& creds,
                                           std::string_view name, std::string_view password) const;

  config::Config& config_;
  storage::Database& store_;
  const bool admin_party_;

  mutable std::mutex mutex_;
  mutable std::uint64_t generation_ = 0;
  mutable std::shared_ptr<const AuthSettings> settings_;
  struct CacheEntry {
    std::string password_digest;  // SHA-256(cache_salt || password)
    std::string rev;
  };
  mutable std::unordered_map<std::string, CacheEntry> verified_;  // by name
  std::string cache_salt_;
  struct Failures {
    int count = 0;
    std::chrono::steady_clock::time_point window_start;
  };
  mutable std::unordered_map<std::string, Failures> failures_;
  // failures_.size(), readable without the mutex: a request skips the lockout check while it
  // is 0. A failure recorded by another thread a moment ago may be missed by a request already
  // under way, as it would be had that request come first.
  mutable std::atomic<std::size_t> failures_remembered_{0};
  static constexpr std::size_t kUpgradesMax = 64;
  mutable std::unordered_set<std::string> upgrading_;  // names with an upgrade under way
};

class WorkerPool;
// Runs auth.upgrade_hash(u, janitor) on `workers`, or right here when there is no pool.
void schedule_hash_upgrade(const Authenticator& auth, WorkerPool* workers,
                           core::TxIdJanitor* janitor, HashUpgrade u);

}  // namespace chaise::http
