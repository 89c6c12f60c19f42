#include "core/security/security.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <re2/re2.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "core/util/json_text.h"

namespace chaise::core {

using OJson = nlohmann::ordered_json;

namespace {

std::string to_hex(const unsigned char* data, std::size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kHex[data[i] >> 4]);
    out.push_back(kHex[data[i] & 0xf]);
  }
  return out;
}

const EVP_MD* prf_digest(std::string_view prf) {
  if (prf == "sha") return EVP_sha1();
  if (prf == "sha224") return EVP_sha224();
  if (prf == "sha256") return EVP_sha256();
  if (prf == "sha384") return EVP_sha384();
  if (prf == "sha512") return EVP_sha512();
  return nullptr;
}

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// "<a>,<b>[,<c>]" -> parts.
std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  while (true) {
    const auto comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return parts;
    text.remove_prefix(comma + 1);
  }
}

Outcome<SecurityGroup> parse_group(const OJson& body, const char* which) {
  SecurityGroup group;
  const auto it = body.find(which);
  if (it == body.end()) return group;
  if (!it->is_object()) {
    return err::bad_request(std::string(which) + " must be a JSON object");
  }
  for (const char* field : {"names", "roles"}) {
    const auto list = it->find(field);
    if (list == it->end()) continue;
    if (!list->is_array()) {
      return err::bad_request(std::string(which) + "." + field + " must be a JSON list of strings");
    }
    auto& out = std::string_view(field) == "names" ? group.names : group.roles;
    for (const auto& item : *list) {
      if (!item.is_string()) {
        return err::bad_request(std::string(which) + "." + field +
                                " must be a JSON list of strings");
      }
      out.push_back(item.get<std::string>());
    }
  }
  return group;
}

bool group_admits(const UserCtx& user, const SecurityGroup& group) {
  if (user.name && contains(group.names, *user.name)) return true;
  return std::any_of(user.roles.begin(), user.roles.end(),
                     [&](const std::string& role) { return contains(group.roles, role); });
}

}  // namespace

bool UserCtx::has_role(std::string_view role) const { return contains(roles, role); }

OJson UserCtx::to_json() const {
  OJson out = OJson::object();
  out["name"] = name ? OJson(*name) : OJson(nullptr);
  out["roles"] = roles;
  return out;
}

std::string pbkdf2_hex(std::string_view prf, std::string_view password, std::string_view salt,
                       std::int64_t iterations) {
  const EVP_MD* md = prf_digest(prf);
  if (md == nullptr || iterations <= 0 || iterations > INT32_MAX) return {};
  const int size = EVP_MD_get_size(md);
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  if (PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                        reinterpret_cast<const unsigned char*>(salt.data()),
                        static_cast<int>(salt.size()), static_cast<int>(iterations), md, size,
                        out.data()) != 1) {
    return {};
  }
  return to_hex(out.data(), static_cast<std::size_t>(size));
}

std::string random_hex32() {
  std::array<unsigned char, 16> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<std::size_t>(n);
  }
  return to_hex(bytes.data(), bytes.size());
}

PasswordHash hash_password(std::string_view password, std::string_view prf,
                           std::int64_t iterations) {
  PasswordHash hash;
  hash.scheme = "pbkdf2";
  hash.prf = std::string(prf);
  hash.salt = random_hex32();
  hash.iterations = iterations;
  hash.derived_key = pbkdf2_hex(prf, password, hash.salt, iterations);
  return hash;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool verify_password(const PasswordHash& hash, std::string_view password) {
  std::string computed;
  if (hash.scheme == "pbkdf2") {
    computed = pbkdf2_hex(hash.prf, password, hash.salt, hash.iterations);
  } else if (hash.scheme == "simple") {
    std::string input(password);
    input.append(hash.salt);
    std::array<unsigned char, SHA_DIGEST_LENGTH> digest{};
    SHA1(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest.data());
    computed = to_hex(digest.data(), digest.size());
  }
  if (computed.empty()) return false;
  return constant_time_equal(computed, hash.derived_key);
}

std::optional<PasswordHash> parse_admin_hash(std::string_view value) {
  PasswordHash hash;
  std::string_view rest;
  if (value.starts_with("-hashed-")) {
    const auto parts = split_commas(value.substr(8));
    if (parts.size() != 2) return std::nullopt;
    hash.scheme = "simple";
    hash.derived_key = std::string(parts[0]);
    hash.salt = std::string(parts[1]);
    return hash;
  }
  if (value.starts_with("-pbkdf2-")) {
    rest = value.substr(8);
  } else if (value.starts_with("-pbkdf2:")) {
    const auto dash = value.find('-', 8);
    if (dash == std::string_view::npos) return std::nullopt;
    hash.prf = std::string(value.substr(8, dash - 8));
    if (prf_digest(hash.prf) == nullptr) return std::nullopt;
    rest = value.substr(dash + 1);
  } else {
    return std::nullopt;
  }
  const auto parts = split_commas(rest);
  if (parts.size() != 3) return std::nullopt;
  hash.scheme = "pbkdf2";
  hash.derived_key = std::string(parts[0]);
  hash.salt = std::string(parts[1]);
  const auto [end, ec] =
      std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), hash.iterations);
  if (ec != std::errc{} || end != parts[2].data() + parts[2].size() || hash.iterations <= 0) {
    return std::nullopt;
  }
  return hash;
}

std::string format_admin_hash(const PasswordHash& hash) {
  if (hash.scheme == "simple") return "-hashed-" + hash.derived_key + "," + hash.salt;
  return "-pbkdf2:" + hash.prf + "-" + hash.derived_key + "," + hash.salt + "," +
         std::to_string(hash.iterations);
}

SecurityObject default_security(bool admin_only) {
  SecurityObject sec;
  if (admin_only) {
    sec.admins.roles = {std::string(kAdminRole)};
    sec.members.roles = {std::string(kAdminRole)};
    sec.raw = OJson{{"members", {{"roles", {kAdminRole}}}}, {"admins", {{"roles", {kAdminRole}}}}};
  }
  return sec;
}

std::string peruser_db_name(std::string_view prefix, std::string_view user) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(prefix);
  for (const char c : user) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x10) name.push_back(kHex[b >> 4]);
    name.push_back(kHex[b & 0xf]);
  }
  return name;
}

std::optional<OJson> security_with_user(const OJson& raw, std::string_view user, bool add) {
  OJson out = raw.is_object() ? raw : OJson::object();
  bool changed = false;
  for (const char* group : {"admins", "members"}) {
    OJson& g = out[group];
    if (!g.is_object()) g = OJson::object();
    OJson& names = g["names"];
    if (!names.is_array()) names = OJson::array();
    const auto at = std::find(names.begin(), names.end(), OJson(std::string(user)));
    if (add && at == names.end()) {
      names.insert(names.begin(), std::string(user));  // CouchDB: [User | Names]
      changed = true;
    } else if (!add && at != names.end()) {
      names.erase(at);
      changed = true;
    }
  }
  if (!changed) return std::nullopt;
  return out;
}

Outcome<SecurityObject> parse_security(const OJson& body) {
  if (!body.is_object()) return err::bad_request("Security object must be a JSON object");
  SecurityObject sec;
  auto admins = parse_group(body, "admins");
  if (auto* e = std::get_if<CouchError>(&admins)) return *e;
  auto members = parse_group(body, "members");
  if (auto* e = std::get_if<CouchError>(&members)) return *e;
  sec.admins = std::get<SecurityGroup>(std::move(admins));
  sec.members = std::get<SecurityGroup>(std::move(members));
  sec.raw = body;
  return sec;
}

bool is_db_admin(const UserCtx& user, const SecurityObject& sec) {
  return user.is_server_admin() || group_admits(user, sec.admins);
}

bool is_db_member(const UserCtx& user, const SecurityObject& sec) {
  if (is_db_admin(user, sec)) return true;
  if (sec.members.empty()) return true;
  return group_admits(user, sec.members);
}

// --- _users ---------------------------------------------------------------------------------------

namespace {

std::optional<std::string> doc_name_of_id(std::string_view id) {
  if (!id.starts_with(kUserDocPrefix)) return std::nullopt;
  return std::string(id.substr(kUserDocPrefix.size()));
}

bool is_password_field(std::string_view key) {
  static constexpr std::array<std::string_view, 8> kFields = {
      "derived_key",  "iterations",    "password",   "password_scheme",
      "password_sha", "preserve_salt", "pbkdf2_prf", "salt"};
  return std::find(kFields.begin(), kFields.end(), key) != kFields.end();
}

// The _auth design document's validate_doc_update, in C++ (admin: server or db admin of _users,
// which in Chaise is the server admin).
std::optional<CouchError> validate_user_doc(const OJson& doc, const std::optional<OJson>& old,
                                            const UserCtx& user) {
  const bool admin = user.is_server_admin();
  if (doc.value("_deleted", false) == true) {
    const OJson old_name = old ? old->value("name", OJson()) : OJson();
    const OJson user_name = user.name ? OJson(*user.name) : OJson();
    // JavaScript's ==: null == undefined, strings by value.
    if (admin || old_name == user_name) return std::nullopt;
    return err::forbidden("Only admins may delete other user docs.");
  }
  if (doc.value("type", OJson()) != "user") return err::forbidden("doc.type must be user");
  const OJson name = doc.value("name", OJson());
  const bool name_truthy = name.is_string()    ? !name.get_ref<const std::string&>().empty()
                           : name.is_boolean() ? name.get<bool>()
                           : name.is_number()  ? name.get<double>() != 0
                                               : !name.is_null();
  if (!name_truthy) return err::forbidden("doc.name is required");
  const auto roles = doc.find("roles");
  if (roles == doc.end() || roles->is_null() || (roles->is_boolean() && !roles->get<bool>())) {
    return err::forbidden("doc.roles must exist");
  }
  if (!roles->is_array()) return err::forbidden("doc.roles must be an array");
  for (const auto& role : *roles) {
    if (!role.is_string()) return err::forbidden("doc.roles can only contain strings");
  }
  if (!name.is_string() ||
      doc.value("_id", std::string()) != std::string(kUserDocPrefix) + name.get<std::string>()) {
    return err::forbidden("Doc ID must be of the form org.couchdb.user:name");
  }
  const std::string& name_s = name.get_ref<const std::string&>();
  if (old && old->value("name", OJson()) != name)
    return err::forbidden("Usernames can not be changed.");
  if (doc.contains("password_sha") && !doc["password_sha"].is_null() &&
      (!doc.contains("salt") || doc["salt"].is_null() || doc["salt"] == "")) {
    return err::forbidden(
        "Users with password_sha must have a salt.See /_utils/script/couch.js for example code.");
  }
  if (const auto scheme = doc.find("password_scheme");
      scheme != doc.end() && !scheme->is_null() && *scheme != "" && *scheme != false) {
    if (*scheme != "simple" && *scheme != "pbkdf2" && *scheme != "simple+pbkdf2") {
      return err::forbidden("Password scheme `" +
                            (scheme->is_string() ? scheme->get<std::string>() : scheme->dump()) +
                            "` not supported.");
    }
    if (*scheme == "pbkdf2") {
      if (!doc.contains("iterations") || !doc["iterations"].is_number()) {
        return err::forbidden("iterations must be a number.");
      }
      if (!doc.contains("derived_key") || !doc["derived_key"].is_string()) {
        return err::forbidden("derived_key must be a string.");
      }
    }
  }
  std::vector<std::string> new_roles;
  for (const auto& role : *roles) new_roles.push_back(role.get<std::string>());
  if (!admin) {
    if (old) {
      if (!user.name || *user.name != name_s) {
        return err::forbidden("You may only update your own user document.");
      }
      std::vector<std::string> old_roles;
      if (const auto r = old->find("roles"); r != old->end() && r->is_array()) {
        for (const auto& role : *r) {
          if (role.is_string()) old_roles.push_back(role.get<std::string>());
        }
      }
      std::sort(old_roles.begin(), old_roles.end());
      std::vector<std::string> sorted = new_roles;
      std::sort(sorted.begin(), sorted.end());
      if (old_roles != sorted) return err::forbidden("Only _admin may edit roles");
    } else if (!new_roles.empty()) {
      return err::forbidden("Only _admin may set roles");
    }
  }
  for (const auto& role : new_roles) {
    if (role != "_metrics" && !role.empty() && role.front() == '_') {
      return err::forbidden("No system roles (starting with underscore) in users db.");
    }
  }
  if (!name_s.empty() && name_s.front() == '_') {
    return err::forbidden("Username may not start with underscore.");
  }
  if (name_s.find(':') != std::string::npos) {
    return err::forbidden("Character `:` is not allowed in usernames.");
  }
  return std::nullopt;
}

}  // namespace

namespace {

// An Erlang string literal at `text[i]` (which is '"'), with its escapes; advances `i`.
std::optional<std::string> erlang_string(std::string_view text, std::size_t& i) {
  std::string out;
  for (++i; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      ++i;
      return out;
    }
    if (c == '\\') {
      if (++i == text.size()) return std::nullopt;
      switch (text[i]) {
        case 'n':
          c = '\n';
          break;
        case 't':
          c = '\t';
          break;
        case 'r':
          c = '\r';
          break;
        case 's':
          c = ' ';
          break;
        default:
          c = text[i];
      }
    }
    out.push_back(c);
  }
  return std::nullopt;
}

void skip_space(std::string_view text, std::size_t& i) {
  while (i < text.size() &&
         (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
    ++i;
}

constexpr std::string_view kRequirementError = "Password does not conform to requirements.";
constexpr std::size_t kPasswordRulesMax = 100;

// couch_users_db:validate_password: every rule must find a match in the password.
std::optional<CouchError> check_password_rules(const UserDbRules& rules,
                                               const std::string& password) {
  if (!rules.password_rules) return err::forbidden("Server cannot hash passwords at this time.");
  for (const PasswordRule& rule : *rules.password_rules) {
    RE2::Options options;
    options.set_log_errors(false);
    const RE2 re(rule.regexp, options);
    if (!re.ok()) return err::forbidden("Server cannot hash passwords at this time.");
    if (!RE2::PartialMatch(password, re)) {
      return err::bad_request(rule.message);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<PasswordRule>> parse_password_rules(std::string_view text) {
  std::vector<PasswordRule> rules;
  std::size_t i = 0;
  skip_space(text, i);
  if (i == text.size()) return rules;
  if (text[i] != '[') return std::nullopt;
  ++i;
  skip_space(text, i);
  if (i < text.size() && text[i] == ']') {
    ++i;
  } else {
    while (true) {
      if (rules.size() >= kPasswordRulesMax) return std::nullopt;
      skip_space(text, i);
      if (i == text.size()) return std::nullopt;
      PasswordRule rule;
      rule.message = std::string(kRequirementError);
      if (text[i] == '"') {
        auto re = erlang_string(text, i);
        if (!re) return std::nullopt;
        rule.regexp = std::move(*re);
      } else if (text[i] == '{') {
        ++i;
        skip_space(text, i);
        if (i == text.size() || text[i] != '"') return std::nullopt;
        auto re = erlang_string(text, i);
        if (!re) return std::nullopt;
        rule.regexp = std::move(*re);
        skip_space(text, i);
        if (i < text.size() && text[i] == ',') {
          ++i;
          skip_space(text, i);
          if (i == text.size() || text[i] != '"') return std::nullopt;
          auto reason = erlang_string(text, i);
          if (!reason) return std::nullopt;
          if (!reason->empty()) rule.message += " " + *reason;
          skip_space(text, i);
        }
        if (i == text.size() || text[i] != '}') return std::nullopt;
        ++i;
      } else {
        return std::nullopt;
      }
      rules.push_back(std::move(rule));
      skip_space(text, i);
      if (i == text.size()) return std::nullopt;
      if (text[i] == ']') {
        ++i;
        break;
      }
      if (text[i] != ',') return std::nullopt;
      ++i;
    }
  }
  skip_space(text, i);
  if (i != text.size()) return std::nullopt;
  return rules;
}

Outcome<OJson> prepare_user_doc(const OJson& doc, const std::optional<OJson>& old,
                                const UserCtx& user, const UserDbRules& rules) {
  const std::string id = doc.value("_id", std::string());
  if (id.starts_with("_design/")) {
    if (!user.is_server_admin()) {
      return err::forbidden("Only administrators can change design docs in the users database.");
    }
    return doc;
  }
  // couch_users_db:before_doc_update: another user's doc is "missing" to a non-admin.
  const auto doc_name = doc_name_of_id(id);
  if (!user.is_server_admin() && user.name && (!doc_name || *doc_name != *user.name)) {
    return err::not_found();
  }
  OJson body = doc;
  const auto password = doc.find("password");
  if (password != doc.end() && !password->is_null()) {
    if (!password->is_string()) {
      return err::forbidden("Password value of '" + password->dump() + "' is invalid.");
    }
    if (auto error = check_password_rules(rules, password->get_ref<const std::string&>())) {
      return *error;
    }
    std::string salt = random_hex32();
    if (doc.value("preserve_salt", false) == true) {
      if (const auto s = doc.find("salt"); s != doc.end() && s->is_string()) salt = *s;
    }
    const std::string key =
        pbkdf2_hex(rules.prf, password->get_ref<const std::string&>(), salt, rules.iterations);
    if (key.empty()) return err::forbidden("Server cannot hash passwords at this time.");
    // The _id and _rev first, then CouchDB's order: the new credential fields, then the rest.
    OJson out = OJson::object();
    for (const auto& [k, v] : doc.items()) {
      if (k == "_id" || k == "_rev") out[k] = v;
    }
    out["password_scheme"] = "pbkdf2";
    out["pbkdf2_prf"] = rules.prf;
    out["salt"] = salt;
    out["iterations"] = rules.iterations;
    out["derived_key"] = key;
    for (const auto& [k, v] : doc.items()) {
      if (k != "_id" && k != "_rev" && !is_password_field(k)) out[k] = v;
    }
    body = std::move(out);
  }
  if (auto error = validate_user_doc(body, old, user)) return *error;
  return body;
}

bool may_read_user_doc(const UserCtx& user, std::string_view doc_id) {
  if (user.is_server_admin()) return true;
  const auto name = doc_name_of_id(doc_id);
  return name && user.name && *name == *user.name;
}

bool needs_hash_upgrade(const PasswordHash& hash, const UserDbRules& rules) {
  return hash.scheme != "pbkdf2" || hash.prf != rules.prf || hash.iterations != rules.iterations;
}

bool strip_non_public_fields(OJson& doc, const std::vector<std::string>& fields) {
  bool any = false;
  for (auto it = doc.begin(); it != doc.end();) {
    const std::string& k = it.key();
    if (k.starts_with('_')) {
      ++it;
    } else if (std::find(fields.begin(), fields.end(), k) != fields.end()) {
      any = true;
      ++it;
    } else {
      it = doc.erase(it);
    }
  }
  return any;
}

std::optional<std::string> public_user_doc_body(std::string_view body,
                                                const std::vector<std::string>& fields) {
  auto parsed = parse_json_text(body, JsonNumbers::exact);
  auto* doc = std::get_if<OJson>(&parsed);
  if (doc == nullptr || !doc->is_object() || !strip_non_public_fields(*doc, fields))
    return std::nullopt;
  return dump_json(*doc);
}

std::optional<PasswordHash> user_doc_password(const OJson& doc) {
  const std::string scheme = doc.value("password_scheme", std::string("simple"));
  PasswordHash hash;
  hash.scheme = scheme;
  hash.salt = doc.value("salt", std::string());
  if (scheme == "pbkdf2") {
    const auto key = doc.find("derived_key");
    const auto iterations = doc.find("iterations");
    if (key == doc.end() || !key->is_string() || iterations == doc.end() ||
        !iterations->is_number_integer()) {
      return std::nullopt;
    }
    hash.derived_key = *key;
    hash.iterations = *iterations;
    hash.prf = doc.value("pbkdf2_prf", std::string("sha"));
    return hash;
  }
  if (scheme == "simple") {
    const auto sha = doc.find("password_sha");
    if (sha == doc.end() || !sha->is_string()) return std::nullopt;
    hash.derived_key = *sha;
    return hash;
  }
  return std::nullopt;
}

}  // namespace chaise::core
