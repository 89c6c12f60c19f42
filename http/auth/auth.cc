#include "http/auth/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <ctime>

#include "config/settings.h"
#include "core/batch/doc_batches.h"
#include "core/db/databases.h"
#include "core/db/db_cache.h"
#include "core/db/installation.h"
#include "core/docs/attachments.h"
#include "core/docs/documents.h"
#include "core/util/ascii.h"
#include "core/util/digest.h"
#include "core/util/json_text.h"
#include "http/transport/workers.h"

namespace chaise::http {

namespace {

using OJson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// couch_auth_lockout: 5 failures of one user from one address within 5 minutes lock that pair;
// Chaise also locks an address after 50 failures across all names.
constexpr int kFailuresPerUserMax = 5;
constexpr int kFailuresPerPeerMax = 50;
constexpr auto kFailureWindow = std::chrono::minutes(5);
constexpr std::size_t kFailureEntriesMax = 100'000;
constexpr std::size_t kVerifiedEntriesMax = 100'000;
constexpr std::string_view kLockoutReason =
    "Account is temporarily locked due to multiple authentication failures";

std::vector<std::string> split_names(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  for (char c : text) {
    if (c == ',') {
      out.push_back(current);
      current.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      current.push_back(c);
    }
  }
  out.push_back(current);
  std::erase(out, std::string());
  return out;
}

std::string hmac(std::string_view alg, std::string_view key, std::string_view data) {
  const EVP_MD* md = alg == "sha" ? EVP_sha1() : alg == "sha256" ? EVP_sha256() : nullptr;
  if (md == nullptr) return {};
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int size = 0;
  HMAC(md, key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &size);
  return std::string(reinterpret_cast<const char*>(out.data()), size);
}

std::string to_hex(std::string_view bytes, bool upper = false) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xf]);
  }
  return out;
}

std::string base64url_encode(std::string_view bytes) {
  std::string out = core::base64_encode(bytes);
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

// The value of cookie `name` in the Cookie header(s), or nullopt.
std::optional<std::string> cookie_value(const Request& req, std::string_view name) {
  const auto range = req.equal_range(beast_http::field::cookie);
  for (auto field = range.first; field != range.second; ++field) {
    std::string_view rest = field->value();
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      std::string_view pair = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
      while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
      std::string_view value = pair.substr(eq + 1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
        value.remove_suffix(1);
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      return std::string(value);
    }
  }
  return std::nullopt;
}

std::int64_t now_seconds() { return static_cast<std::int64_t>(std::time(nullptr)); }

// mochiweb_cookies' RFC 2109 date: "Wed, 16-May-2007 20:45:50 GMT"
std::string cookie_date(std::int64_t seconds) {
  static constexpr std::array<const char*, 7> kDays = {"Sun", "Mon", "Tue", "Wed",
                                                       "Thu", "Fri", "Sat"};
  static constexpr std::array<const char*, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%s, %02d-%s-%04d %02d:%02d:%02d GMT", kDays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buffer;
}

std::string cookie_header(const Client& client, const AuthSettings& s, std::string_view value) {
  std::string out = "AuthSession=";
  out.append(value).append("; Version=1");
  if (s.allow_persistent_cookies) {
    out.append("; Expires=").append(cookie_date(now_seconds() + s.timeout_s));
    out.append("; Max-Age=").append(std::to_string(s.timeout_s));
  }
  if (client.secure) out.append("; Secure");
  if (!s.cookie_domain.empty()) out.append("; Domain=").append(s.cookie_domain);
  out.append("; Path=/; HttpOnly");
  if (!s.same_site.empty()) out.append("; SameSite=").append(s.same_site);
  return out;
}

}  // namespace

AuthSettings auth_settings(const config::Sections& values, bool admin_party) {
  AuthSettings s;
  if (const auto admins = values.find("admins"); admins != values.end()) {
    for (const auto& [name, value] : admins->second) {
      if (auto hash = core::parse_admin_hash(value)) {
        s.admins.emplace(name, std::move(*hash));
      } else {
        // A plain password the startup hashing has not replaced (in-memory config): hash it now.
        s.admins.emplace(name, core::hash_password(value, "sha256", 1));
      }
    }
  }
  s.admin_party = admin_party && s.admins.empty();
  s.require_valid_user = config::get_bool(values, "chttpd", "require_valid_user", false) ||
                         config::get_auth(values, "require_valid_user") == "true";
  s.secret = config::get_auth(values, "secret");
  s.timeout_s =
      std::max<std::int64_t>(1, std::atoll(config::get_auth(values, "timeout", "600").c_str()));
  s.allow_persistent_cookies =
      config::get_auth(values, "allow_persistent_cookies", "true") != "false";
  const std::string same_site = core::ascii_lower(config::get_auth(values, "same_site"));
  if (same_site == "none") s.same_site = "None";
  if (same_site == "lax") s.same_site = "Lax";
  if (same_site == "strict") s.same_site = "Strict";
  s.cookie_domain = config::get_auth(values, "cookie_domain");
  std::vector<std::string> algorithms;
  for (const auto& alg : split_names(config::get_auth(values, "hash_algorithms", "sha256, sha"))) {
    if (alg == "sha256" || alg == "sha") algorithms.push_back(alg);
  }
  if (algorithms.empty()) algorithms.push_back("sha256");
  s.hash_algorithms = std::move(algorithms);
  const std::string handlers = config::get_string(values, "chttpd", "authentication_handlers");
  if (!handlers.empty()) {
    s.cookie_enabled = handlers.find("cookie_authentication_handler") != std::string::npos;
    s.basic_enabled = handlers.find("default_authentication_handler") != std::string::npos;
  }
  s.proxy_enabled = handlers.find("proxy_authentication_handler") != std::string::npos;
  s.jwt_enabled = handlers.find("jwt_authentication_handler") != std::string::npos;
  if (s.jwt_enabled) s.jwt = jwt_settings(values);
  s.proxy_use_secret = config::get_auth(values, "proxy_use_secret") == "true";
  s.x_auth_username = config::get_auth(values, "x_auth_username", s.x_auth_username);
  s.x_auth_roles = config::get_auth(values, "x_auth_roles", s.x_auth_roles);
  s.x_auth_token = config::get_auth(values, "x_auth_token", s.x_auth_token);
  s.public_fields = split_names(config::get_auth(values, "public_fields"));
  s.user_rules.prf = config::get_auth(values, "pbkdf2_prf", "sha256");
  s.user_rules.password_rules =
      core::parse_password_rules(config::get_auth(values, "password_regexp"));
  if (!s.user_rules.password_rules) {
    spdlog::error(
        "[chttpd_auth] password_regexp is not a list of regexps and {{regexp, reason}} "
        "tuples: password changes are refused until it is");
  }
  s.upgrade_hash_on_auth = config::get_auth(values, "upgrade_hash_on_auth", "true") != "false";
  s.cors = cors_config(values);
  s.user_rules.iterations = std::max<std::int64_t>(
      1, std::atoll(config::get_auth(values, "iterations", "600000").c_str()));
  return s;
}

Authenticator::Authenticator(config::Config& config, storage::Database& store, bool admin_party)
    : config_(config),
      store_(store),
      admin_party_(admin_party),
      cache_salt_(core::random_hex32()) {}

std::shared_ptr<const AuthSettings> Authenticator::settings() const {
  const std::uint64_t generation = config_.generation();
  std::lock_guard lock(mutex_);
  if (!settings_ || generation != generation_) {
    settings_ =
        std::make_shared<const AuthSettings>(auth_settings(*config_.snapshot(), admin_party_));
    generation_ = generation;
    verified_.clear();  // an admin's password may have changed
  }
  return settings_;
}

std::vector<std::string> Authenticator::handler_names() const {
  const auto s = settings();
  std::vector<std::string> names;
  if (s->proxy_enabled) names.push_back("proxy");
  if (s->jwt_enabled) names.push_back("jwt");
  if (s->cookie_enabled) names.push_back("cookie");
  if (s->basic_enabled) names.push_back("default");
  return names;
}

storage::Result<std::optional<Authenticator::Creds>> Authenticator::read_user_creds(
    storage::Transaction& tr, std::string_view name) {
  // Read as the server (chttpd_auth_cache reads with an admin context).
  auto opened = core::open_db(tr, core::kUsersDb);
  if (!opened.ok()) return opened.error();
  if (core::failed(*opened)) return std::optional<Creds>();
  const auto& db = std::get<core::DbRef>(*opened);
  const std::string id = std::string(core::kUserDocPrefix) + std::string(name);
  auto doc = core::get_doc_json(tr, db, id, core::DocReadOptions{});
  if (!doc.ok()) return doc.error();
  if (core::failed(*doc)) return std::optional<Creds>();
  OJson body = OJson::parse(std::get<std::string>(*doc), nullptr, false);
  if (!body.is_object()) return std::optional<Creds>();
  Creds c;
  c.user.name = std::string(name);
  if (const auto r = body.find("roles"); r != body.end() && r->is_array()) {
    for (const auto& role : *r) {
      if (role.is_string()) c.user.roles.push_back(role.get<std::string>());
    }
  }
  c.hash = core::user_doc_password(body);
  c.salt = body.value("salt", std::string());
  c.rev = body.value("_rev", std::string());
  return std::optional<Creds>(std::move(c));
}

storage::Result<std::optional<Authenticator::Creds>> Authenticator::lookup(
    const AuthSettings& s, std::string_view name) const {
  std::optional<Creds> creds;
  if (const auto admin = s.admins.find(std::string(name)); admin != s.admins.end()) {
    creds.emplace();
    creds->user.name = std::string(name);
    creds->user.roles = {std::string(core::kAdminRole)};
    creds->hash = admin->second;
    creds->salt = admin->second.salt;
  }
  // Every request with credentials asks, so the user document's credentials are remembered
  // between requests (core/db/db_cache.h): apply_edit marks each write to _users, and a changed
  // password or role counts from the very next request.
  auto tr = store_.create_transaction();
  if (creds) tr.set_timeout(kAdminRolesTime);
  auto doc = core::remembered_read<std::optional<Creds>>(
      tr, core::memo_key("user_doc", name),
      [&](storage::Transaction& t) { return read_user_creds(t, name); });
  if (!doc.ok() && !creds) return doc.error();
  if (doc.ok() && **doc) {
    const Creds& user = ***doc;
    if (!creds) {
      creds = user;
    } else {
      for (const auto& role : user.user.roles) {  // an admin with a user doc: its roles are added
        if (!creds->user.has_role(role)) creds->user.roles.push_back(role);
      }
    }
  }
  if (creds && doc.ok()) creds->read_version = storage::SeenReadVersion::of(tr);
  return creds;
}

bool Authenticator::throttled(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = failures_.find(key);
  if (it == failures_.end()) return false;
  if (Clock::now() - it->second.window_start > kFailureWindow) {
    failures_.erase(it);
    failures_remembered_.store(failures_.size(), std::memory_order_relaxed);
    return false;
  }
  const int limit = key.starts_with("p:") ? kFailuresPerPeerMax : kFailuresPerUserMax;
  return it->second.count >= limit;
}

void Authenticator::record_failure(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  if (failures_.size() >= kFailureEntriesMax) {
    std::erase_if(failures_,
                  [&](const auto& e) { return now - e.second.window_start > kFailureWindow; });
    if (failures_.size() >= kFailureEntriesMax) failures_.clear();
  }
  auto& f = failures_[key];
  if (f.count == 0 || now - f.window_start > kFailureWindow) {
    f.count = 0;
    f.window_start = now;
  }
  ++f.count;
  failures_remembered_.store(failures_.size(), std::memory_order_relaxed);
}

bool Authenticator::check_password(const AuthSettings&, const Creds& creds, std::string_view name,
                                   std::string_view password, std::string_view known) const {
  if (!creds.hash) return false;
  const std::string digest = known.empty() ? password_digest(password) : std::string(known);
  {
    std::lock_guard lock(mutex_);
    const auto it = verified_.find(std::string(name));
    if (it != verified_.end() && it->second.rev == creds.rev &&
        core::constant_time_equal(it->second.password_digest, digest)) {
      return true;
    }
  }
  if (!core::verify_password(*creds.hash, password)) return false;
  std::lock_guard lock(mutex_);
  if (verified_.size() >= kVerifiedEntriesMax) verified_.clear();
  verified_[std::string(name)] = CacheEntry{digest, creds.rev};
  return true;
}

std::optional<Authenticator::Creds> Authenticator::verify_login(
    const AuthSettings& s, std::string_view name, std::string_view password, std::string_view peer,
    std::optional<core::CouchError>& refused, std::string_view digest) const {
  const auto user_key = [&] { return "u:" + std::string(peer) + "\n" + std::string(name); };
  const auto peer_key = [&] { return "p:" + std::string(peer); };
  // No failure remembered (the common case): no keys to build, no lock to take.
  if (failures_remembered_.load(std::memory_order_relaxed) != 0 &&
      (throttled(user_key()) || throttled(peer_key()))) {
    refused = core::err::forbidden(std::string(kLockoutReason));
    return std::nullopt;
  }
  auto creds = lookup(s, name);
  if (!creds.ok()) {
    refused = core::storage_failure(creds.error());
    return std::nullopt;
  }
  if (!*creds || !check_password(s, **creds, name, password, digest)) {
    record_failure(user_key());
    record_failure(peer_key());
    return std::nullopt;
  }
  return std::move(*creds);
}

std::string Authenticator::ensure_secret() const {
  const auto s = settings();
  if (!s->secret.empty()) return s->secret;
  // The installation's, so that a cookie made by one node of a cluster holds on every other; kept
  // in the configuration as CouchDB keeps the secret it generates.
  auto shared = core::installation_value(store_, core::kCookieSecretName, core::random_hex32);
  if (!shared.ok()) {
    spdlog::warn("auth: cannot read the cookie secret from the store: {}",
                 storage::error_name(shared.error()));
    return {};
  }
  const std::string secret = std::move(*shared);
  try {
    if (config_.writable_file().empty()) {
      config_.pin("chttpd_auth", "secret", secret);  // no file: it stays over a reload
    } else {
      config_.set("chttpd_auth", "secret", secret);
    }
  } catch (const config::ConfigError& e) {
    spdlog::warn("auth: cannot persist [chttpd_auth] secret: {}", e.what());
    config_.pin("chttpd_auth", "secret", secret);
  }
  return settings()->secret;
}

std::string Authenticator::make_cookie(const Client& client, const AuthSettings& s,
                                       std::string_view name, std::string_view salt,
                                       std::int64_t now) const {
  char hex[24];
  const auto end = std::to_chars(hex, hex + sizeof hex, now, 16).ptr;
  std::string time_hex(hex, end);
  for (char& c : time_hex) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string data(name);
  data.append(":").append(time_hex);
  const std::string mac = hmac(s.hash_algorithms.front(), s.secret + std::string(salt), data);
  return cookie_header(client, s, base64url_encode(data + ":" + mac));
}

std::string Authenticator::clear_cookie(const Client& client) const {
  return cookie_header(client, *settings(), "");
}

Authenticator::Presented Authenticator::presented(const Request& req) const {
  Presented out;
  const auto auth = req.find(beast_http::field::authorization);
  if (auth == req.end() || !auth->value().starts_with("Basic ")) return out;
  const auto decoded = core::base64_decode(auth->value().substr(6));
  if (!decoded) {
    out.invalid_base64 = true;
    return out;
  }
  const auto colon = decoded->find(':');
  if (colon == std::string::npos || *decoded == "_:_") return out;
  out.name = decoded->substr(0, colon);
  out.password = decoded->substr(colon + 1);
  out.digest = password_digest(out.password);
  return out;
}

std::string Authenticator::password_digest(std::string_view password) const {
  std::string salted = cache_salt_;
  salted.append(password);
  return core::sha256(salted);
}

bool Authenticator::may_hash_password(const Presented& basic) const {
  if (!basic.name) return false;
  std::lock_guard lock(mutex_);
  const auto it = verified_.find(*basic.name);
  return it == verified_.end() ||
         !core::constant_time_equal(it->second.password_digest, basic.digest);
}

AuthResult Authenticator::authenticate(const Request& req, const Client& client,
                                       const Presented& basic) const {
  const auto s = settings();
  AuthResult result;

  // Proxy headers, when configured, come first (CouchDB's documented handler order).
  if (s->proxy_enabled) {
    const auto user = req.find(s->x_auth_username);
    if (user != req.end() && !user->value().empty()) {
      bool accept = true;
      if (s->proxy_use_secret && !s->secret.empty()) {
        const auto token = req.find(s->x_auth_token);
        accept = false;
        if (token != req.end()) {
          for (const auto& alg : s->hash_algorithms) {
            if (core::constant_time_equal(to_hex(hmac(alg, s->secret, user->value())),
                                          token->value())) {
              accept = true;
            }
          }
        }
      }
      if (accept) {
        result.user.name = std::string(user->value());
        if (const auto roles = req.find(s->x_auth_roles); roles != req.end()) {
          result.user.roles = split_names(roles->value());
        }
        result.handler = "proxy";
        return result;
      }
    }
  }

  // Authorization: Bearer <JWT>, when jwt_authentication_handler is configured.
  if (s->jwt_enabled) {
    const std::string_view header = req[beast_http::field::authorization];
    if (header.starts_with("Bearer ")) {
      auto checked = verify_jwt(header.substr(7), s->jwt, now_seconds());
      if (auto* e = std::get_if<core::CouchError>(&checked)) {
        result.error = std::move(*e);
        return result;
      }
      result.user = std::get<core::UserCtx>(std::move(checked));
      result.handler = "jwt";
      return result;
    }
  }

  // The AuthSession cookie.
  if (auto cookie = cookie_value(req, "AuthSession");
      s->cookie_enabled && cookie && !cookie->empty()) {
    const auto decoded = core::base64url_decode(*cookie);
    std::optional<std::array<std::string, 3>> parts;
    if (decoded) {
      const auto a = decoded->find(':');
      const auto b = a == std::string::npos ? a : decoded->find(':', a + 1);
      if (b != std::string::npos) {
        parts = std::array<std::string, 3>{decoded->substr(0, a), decoded->substr(a + 1, b - a - 1),
                                           decoded->substr(b + 1)};
      }
    }
    if (!parts) {
      result.error =
          core::err::bad_request("Malformed AuthSession cookie. Please clear your cookies.");
      return result;
    }
    const auto& [name, time_hex, mac] = *parts;
    std::int64_t stamp = 0;
    const auto [end, ec] =
        std::from_chars(time_hex.data(), time_hex.data() + time_hex.size(), stamp, 16);
    const bool time_ok = ec == std::errc{} && end == time_hex.data() + time_hex.size();
    const std::int64_t now = now_seconds();
    // A node that made no cookie yet takes the installation's secret, which made this one.
    const std::string secret = s->secret.empty() ? ensure_secret() : s->secret;
    if (!secret.empty() && time_ok && now < stamp + s->timeout_s) {
      auto found = lookup(*s, name);
      if (!found.ok()) {
        result.error = core::storage_failure(found.error());
        return result;
      }
      if (const auto& creds = *found) {
        const std::string key = secret + creds->salt;
        const std::string data = name + ":" + time_hex;
        const bool valid =
            std::any_of(s->hash_algorithms.begin(), s->hash_algorithms.end(),
                        [&, &mac = mac](const std::string& alg) {
                          return core::constant_time_equal(hmac(alg, key, data), mac);
                        });
        if (valid) {
          result.user = creds->user;
          result.handler = "cookie";
          result.read_version = creds->read_version;
          const std::int64_t left = stamp + s->timeout_s - now;
          if (static_cast<double>(left) < static_cast<double>(s->timeout_s) * 0.9) {
            result.set_cookie = make_cookie(client, *s, name, creds->salt, now);
          }
          return result;
        }
      }
    }
  }

  // HTTP Basic.
  if (!s->basic_enabled) {
    // Without the default handler, Basic credentials are not read: the request is anonymous.
  } else if (basic.invalid_base64) {
    result.error = core::err::bad_request("Authorization header has invalid base64 value");
    return result;
  } else if (basic.name) {
    std::optional<core::CouchError> refused;
    const auto creds =
        verify_login(*s, *basic.name, basic.password, client.address, refused, basic.digest);
    if (!creds) {
      result.error = refused ? *refused : core::err::unauthorized("Name or password is incorrect.");
      return result;
    }
    result.user = creds->user;
    result.handler = "default";
    result.read_version = creds->read_version;
    result.upgrade = claim_upgrade(*s, *creds, *basic.name, basic.password);
    return result;
  }

  // Nobody: admin party (no admin configured, --admin-party) or anonymous.
  if (s->admin_party && !s->require_valid_user) {
    result.user.roles = {std::string(core::kAdminRole)};
    result.handler = "default";
    return result;
  }
  if (s->require_valid_user) {
    const bool session_login =
        req.method() == beast_http::verb::post &&
        (req.target() == "/_session" || req.target().starts_with("/_session?"));
    if (!session_login) result.error = core::err::unauthorized("Authentication required.");
  }
  return result;
}

Authenticator::Login Authenticator::login(std::string_view name, std::string_view password,
                                          const Client& client) const {
  const auto s = settings();
  Login out;
  std::optional<core::CouchError> refused;
  const auto creds = verify_login(*s, name, password, client.address, refused);
  if (refused) {
    out.error = std::move(refused);
    return out;
  }
  if (!creds) {
    out.set_cookie = clear_cookie(client);
    return out;
  }
  ensure_secret();
  const auto current = settings();
  out.user = creds->user;
  out.upgrade = claim_upgrade(*s, *creds, name, password);
  out.set_cookie = make_cookie(client, *current, name, creds->salt, now_seconds());
  return out;
}

std::optional<HashUpgrade> Authenticator::claim_upgrade(const AuthSettings& s, const Creds& creds,
                                                        std::string_view name,
                                                        std::string_view password) const {
  // Admins of [admins] are hashed at start; only user documents are rewritten (is_doc).
  if (!s.upgrade_hash_on_auth || creds.rev.empty() || !creds.hash ||
      !core::needs_hash_upgrade(*creds.hash, s.user_rules)) {
    return std::nullopt;
  }
  std::lock_guard lock(mutex_);
  if (upgrading_.size() >= kUpgradesMax || !upgrading_.emplace(name).second) return std::nullopt;
  return HashUpgrade{std::string(name), std::string(password), creds.rev};
}

void Authenticator::upgrade_hash(const HashUpgrade& u, core::TxIdJanitor* janitor) const {
  struct Done {  // the user may be upgraded again once this attempt is over, however it ends
    const Authenticator& auth;
    const std::string& name;
    ~Done() {
      std::lock_guard lock(auth.mutex_);
      auth.upgrading_.erase(name);
    }
  } done{*this, u.name};
  const std::string id = std::string(core::kUserDocPrefix) + u.name;
  auto tr = store_.create_transaction();
  auto opened = core::open_db(tr, core::kUsersDb);
  if (!opened.ok() || core::failed(*opened)) return;
  auto current = core::get_doc_json(tr, std::get<core::DbRef>(*opened), id, core::DocReadOptions{});
  if (!current.ok() || core::failed(*current)) return;
  auto parsed = core::parse_json_text(std::get<std::string>(*current), core::JsonNumbers::exact);
  auto* doc = std::get_if<OJson>(&parsed);
  // A document with attachments is left alone: rewriting it would have to carry them over.
  if (doc == nullptr || doc->value("_rev", std::string()) != u.rev || doc->contains("_attachments"))
    return;
  (*doc)["password"] = u.password;
  (*doc)["preserve_salt"] = true;
  const auto s = settings();
  const core::UserCtx server{std::nullopt, {std::string(core::kAdminRole)}};
  auto prepared = core::prepare_user_doc(*doc, *doc, server, s->user_rules);
  auto* body = std::get_if<OJson>(&prepared);
  if (body == nullptr) return;
  auto fields = core::parse_doc(*body);
  auto* fields_ok = std::get_if<core::ParsedDoc>(&fields);
  if (fields_ok == nullptr) return;
  core::DocWriteBatch::Item item;
  item.update.id = id;
  item.update.base_rev = core::RevId::parse(u.rev);
  item.update.body = std::move(fields_ok->body);
  std::vector<core::DocWriteBatch::Item> items;
  items.push_back(std::move(item));
  core::DocWriteBatch batch(std::string(core::kUsersDb), std::move(items));
  while (batch.has_more()) {
    if (!store_.run([&](storage::Transaction& t) { return batch(t); }).ok()) return;
    if (janitor != nullptr && !batch.tx_key().empty()) janitor->committed(batch.tx_key());
    batch.committed();
  }
  const auto& result = batch.results().at(0);
  if (!result || core::failed(*result)) return;  // a conflict: someone else wrote the doc first
  // The password was just checked: the new revision starts verified.
  const std::string new_rev = std::get<core::UpdateResult>(*result).rev.str();
  std::lock_guard lock(mutex_);
  verified_[u.name] = CacheEntry{password_digest(u.password), new_rev};
  spdlog::info("upgraded the stored password hash of user '{}'", u.name);
}

void schedule_hash_upgrade(const Authenticator& auth, WorkerPool* workers,
                           core::TxIdJanitor* janitor, HashUpgrade u) {
  if (workers == nullptr) {
    auth.upgrade_hash(u, janitor);
    return;
  }
  boost::asio::post(workers->executor(),
                    [&auth, janitor, u = std::move(u)] { auth.upgrade_hash(u, janitor); });
}

}  // namespace chaise::http
