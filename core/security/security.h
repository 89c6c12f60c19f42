// core/security/security.h — who someone is and what they may do: user contexts, password hashes, the
// per-database security object, and the rules of CouchDB's _users database.
//
// CouchDB 3.5 semantics throughout (couch_passwords.erl, couch_db.erl check_is_admin/member,
// couch_users_db.erl, the _users design doc's validate_doc_update). Knows nothing about HTTP:
// http/auth.* turns requests into a UserCtx and these answers into 401/403.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/error.h"

namespace chaise::core {

inline constexpr std::string_view kAdminRole = "_admin";
inline constexpr std::string_view kUsersDb = "_users";
inline constexpr std::string_view kUserDocPrefix = "org.couchdb.user:";

// Who a request acts for. name is nullopt for an anonymous request.
struct UserCtx {
  std::optional<std::string> name;
  std::vector<std::string> roles;

  bool has_role(std::string_view role) const;
  bool is_server_admin() const { return has_role(kAdminRole); }
  // {"name":...|null,"roles":[...]}, CouchDB's userCtx object.
  nlohmann::ordered_json to_json() const;
};

// --- Passwords -------------------------------------------------------------------------------------

// CouchDB's stored credential: PBKDF2 (prf sha, sha224, sha256, sha384 or sha512) or the legacy
// "simple" salted SHA-1.
struct PasswordHash {
  std::string scheme;       // "pbkdf2" or "simple"
  std::string prf = "sha";  // pbkdf2 only
  std::string derived_key;  // lowercase hex (pbkdf2) / password_sha (simple)
  std::string salt;
  std::int64_t iterations = 0;
};

// Lowercase hex of PBKDF2-HMAC-<prf>(password, salt, iterations), as long as the prf's digest.
// Empty string for an unknown prf.
std::string pbkdf2_hex(std::string_view prf, std::string_view password, std::string_view salt,
                       std::int64_t iterations);
// 32 lowercase hex digits from the OS's random source (couch_uuids:random()).
std::string random_hex32();
// A new hash of `password` with a fresh salt.
PasswordHash hash_password(std::string_view password, std::string_view prf,
                           std::int64_t iterations);
// True when `password` matches `hash`; the comparison of the derived keys takes the same time
// wherever they differ.
bool verify_password(const PasswordHash& hash, std::string_view password);
// Constant-time equality of two byte strings of equal length (false for different lengths).
bool constant_time_equal(std::string_view a, std::string_view b);

// [admins] values: "-pbkdf2:<prf>-<key>,<salt>,<iterations>", the older "-pbkdf2-<key>,<salt>,<it>"
// (sha) and "-hashed-<sha>,<salt>" (simple). nullopt for anything else, which is a plain password.
std::optional<PasswordHash> parse_admin_hash(std::string_view value);
std::string format_admin_hash(const PasswordHash& hash);

// --- The security object ---------------------------------------------------------------------------

struct SecurityGroup {
  std::vector<std::string> names;
  std::vector<std::string> roles;
  bool empty() const { return names.empty() && roles.empty(); }
};

struct SecurityObject {
  SecurityGroup admins;
  SecurityGroup members;
  // The object as stored (other members, e.g. "couchdb_auth_only", are kept and returned).
  nlohmann::ordered_json raw = nlohmann::ordered_json::object();
};

// What a new database gets: CouchDB 3's [couchdb] default_security = admin_only.
SecurityObject default_security(bool admin_only = true);
// Parses a security object as stored or as PUT by a client; a CouchError (400 bad_request with
// CouchDB's reasons) when its shape is wrong.
Outcome<SecurityObject> parse_security(const nlohmann::ordered_json& body);

// --- Per-user databases (couch_peruser) -----------------------------------------------------------

// The database of user `user`: `prefix` and the hex digits of the name's bytes, lowercase, as
// couch_peruser:user_db_name writes them (integer_to_list(Byte, 16): a byte below 0x10 takes one
// digit).
std::string peruser_db_name(std::string_view prefix, std::string_view user);
// couch_peruser's add_user / remove_user: the security object `raw` with `user` added to (or
// removed from) the names of admins and members; nullopt when it is already so.
std::optional<nlohmann::ordered_json> security_with_user(const nlohmann::ordered_json& raw,
                                                         std::string_view user, bool add);

// couch_db:check_is_admin: a server admin, a name in admins.names or a role in admins.roles.
bool is_db_admin(const UserCtx& user, const SecurityObject& sec);
// couch_db:check_is_member: a db admin, anyone when members is empty, a name or role listed there.
bool is_db_member(const UserCtx& user, const SecurityObject& sec);

// --- The _users database ---------------------------------------------------------------------------

// One of [chttpd_auth] password_regexp's requirements: a new password must contain a match of
// `regexp` (RE2 syntax, which covers the PCRE that such rules use); `message` follows CouchDB's
// "Password does not conform to requirements." when it does not.
struct PasswordRule {
  std::string regexp;
  std::string message;
};

// [chttpd_auth] password_regexp as CouchDB writes it, an Erlang list of regexps and
// {Regexp, Reason} tuples: [{".{10,}", "Min length is 10."}, "\\d+"]. "" and "[]" are no rules;
// nullopt when the value is not such a list (every password change is then refused, as
// CouchDB refuses it).
std::optional<std::vector<PasswordRule>> parse_password_rules(std::string_view config);

struct UserDbRules {
  std::string prf = "sha256";
  std::int64_t iterations = 600000;
  // nullopt: password_regexp could not be read.
  std::optional<std::vector<PasswordRule>> password_rules = std::vector<PasswordRule>{};
};

// couch_users_db:before_doc_update plus the _auth design document's validate_doc_update, for a
// write of `doc` (new body, "_id" included) over `old` (the current body; nullopt when new) by
// `user`. On success the body to store: a "password" member replaced by its PBKDF2 hash. Errors
// are CouchDB's: 403 forbidden with the validation message, 401 unauthorized for an anonymous
// writer where CouchDB says so.
Outcome<nlohmann::ordered_json> prepare_user_doc(const nlohmann::ordered_json& doc,
                                                 const std::optional<nlohmann::ordered_json>& old,
                                                 const UserCtx& user, const UserDbRules& rules);
// couch_users_db:after_doc_read: may `user` read the user doc with this id? (admins and the user
// themself.)
bool may_read_user_doc(const UserCtx& user, std::string_view doc_id);
// couch_password_hasher:needs_upgrade: whether a stored hash differs from what a new password
// gets under `rules` (scheme pbkdf2, its PRF and iterations).
bool needs_hash_upgrade(const PasswordHash& hash, const UserDbRules& rules);
// couch_users_db:strip_non_public_fields: removes every member of `doc` that does not start with
// '_' and is not in `fields` (a user doc as another non-admin user reads it). False when no such
// member is left: CouchDB then answers not_found.
bool strip_non_public_fields(nlohmann::ordered_json& doc, const std::vector<std::string>& fields);
// The same for a stored body (JSON object text, numbers kept exactly): the stripped body, or
// nullopt when nothing is left.
std::optional<std::string> public_user_doc_body(std::string_view body,
                                                const std::vector<std::string>& fields);
// A user doc's credentials, or nullopt when it has none.
std::optional<PasswordHash> user_doc_password(const nlohmann::ordered_json& doc);

}  // namespace chaise::core
