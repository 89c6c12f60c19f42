#include "http/auth/jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <re2/re2.h>

#include <algorithm>
#include <cctype>

#include "core/util/base64.h"
#include "core/util/json_text.h"

namespace chaise::http {

namespace {

using OJson = nlohmann::ordered_json;

// The claim checks jwtf knows (alg is always made).
constexpr std::string_view kChecks[] = {"exp", "iat", "iss", "kid", "nbf", "typ", "sig"};

struct Alg {
  std::string_view name;
  std::string_view kty;  // the [jwt_keys] prefix
  const EVP_MD* (*md)();
  std::size_t ec_half = 0;  // ES: bytes of r and of s in the token's signature
};
constexpr Alg kAlgs[] = {
    {"RS256", "rsa", EVP_sha256},    {"RS384", "rsa", EVP_sha384},
    {"RS512", "rsa", EVP_sha512},    {"ES256", "ec", EVP_sha256, 32},
    {"ES384", "ec", EVP_sha384, 48}, {"ES512", "ec", EVP_sha512, 66},
    {"HS256", "hmac", EVP_sha256},   {"HS384", "hmac", EVP_sha384},
    {"HS512", "hmac", EVP_sha512},
};

const Alg* find_alg(std::string_view name) {
  for (const Alg& a : kAlgs)
    if (a.name == name) return &a;
  return nullptr;
}

void free_pkey(void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); }

// jwtf_keystore:pem_decode, then the key type the entry's prefix asks for.
JwtKey public_key(std::string_view kty, std::string text) {
  JwtKey key;
  for (std::size_t at = 0; (at = text.find("\\n", at)) != std::string::npos;)
    text.replace(at, 2, "\n");
  BIO* bio = BIO_new_mem_buf(text.data(), static_cast<int>(text.size()));
  EVP_PKEY* pkey = bio ? PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  if (pkey == nullptr) {
    key.error = "Not a valid key";
    return key;
  }
  key.public_key = std::shared_ptr<void>(pkey, free_pkey);
  const int type = EVP_PKEY_base_id(pkey);
  if (kty == "rsa" && type != EVP_PKEY_RSA) key.error = "not an RSA public key";
  if (kty == "ec" && type != EVP_PKEY_EC) key.error = "not an EC public key";
  return key;
}

// couch_httpd_auth:get_configured_claims: `exp, nbf, {iss, "MyCompany"}`.
bool parse_required_claims(const std::string& text, JwtSettings& s) {
  static const RE2 kClaim(R"re(([a-z]+)|\{([a-z]+)\s*,\s*"([^"]+)"\})re");
  s.required.clear();
  re2::StringPiece rest(text);
  std::string plain, named, value;
  while (RE2::FindAndConsume(&rest, kClaim, &plain, &named, &value)) {
    std::string name = plain.empty() ? named : plain;
    if (std::find(std::begin(kChecks), std::end(kChecks), name) == std::end(kChecks)) return false;
    std::optional<std::string> v;
    if (plain.empty()) v = value;
    s.required.emplace_back(std::move(name), std::move(v));
  }
  return !s.required.empty() || text.find_first_not_of(" \t") == std::string::npos;
}

// "a, b ,c": the roles of a comma-separated roles claim.
std::vector<std::string> split_roles(std::string_view text) {
  std::vector<std::string> out;
  auto trim = [](std::string_view v) {
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  };
  while (true) {
    const auto comma = text.find(',');
    out.emplace_back(trim(text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  while (!out.empty() && out.back().empty()) out.pop_back();  // re:split's trim
  return out;
}

// roles_claim_path: split at dots not preceded by a backslash; "\." stands for a dot.
std::vector<std::string> split_claim_path(std::string_view path) {
  std::vector<std::string> out(1);
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '\\' && i + 1 < path.size() && path[i + 1] == '.') {
      out.back().push_back('.');
      ++i;
    } else if (path[i] == '.') {
      out.emplace_back();
    } else {
      out.back().push_back(path[i]);
    }
  }
  return out;
}

std::optional<OJson> decode_part(std::string_view part) {
  auto bytes = core::base64url_decode(part);
  if (!bytes) return std::nullopt;
  auto parsed = core::parse_json_text(*bytes, core::JsonNumbers::doubles);
  auto* j = std::get_if<OJson>(&parsed);
  if (j == nullptr) return std::nullopt;
  return std::move(*j);
}

const OJson* member(const OJson& object, std::string_view name) {
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

const std::optional<std::string>* required(const JwtSettings& s, std::string_view check) {
  for (const auto& [name, value] : s.required)
    if (name == check) return &value;
  return nullptr;
}

bool verify_hmac(const Alg& alg, const std::string& secret, std::string_view message,
                 std::string_view mac) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(alg.md(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &len) == nullptr)
    return false;
  return core::constant_time_equal(std::string_view(reinterpret_cast<const char*>(out), len), mac);
}

// An ES signature is r || s, each `half` bytes; OpenSSL verifies the DER form.
std::optional<std::string> jose_to_der(std::string_view sig, std::size_t half) {
  if (sig.size() != 2 * half) return std::nullopt;
  ECDSA_SIG* es = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(sig.data()), static_cast<int>(half),
                        nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(sig.data() + half),
                        static_cast<int>(half), nullptr);
  std::optional<std::string> out;
  if (es != nullptr && r != nullptr && s != nullptr && ECDSA_SIG_set0(es, r, s) == 1) {
    r = s = nullptr;  // owned by es now
    unsigned char* der = nullptr;
    const int len = i2d_ECDSA_SIG(es, &der);
    if (len > 0)
      out = std::string(reinterpret_cast<const char*>(der), static_cast<std::size_t>(len));
    OPENSSL_free(der);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(es);
  return out;
}

bool verify_signature(const Alg& alg, EVP_PKEY* key, std::string_view message,
                      std::string_view sig) {
  std::string der;
  if (alg.ec_half != 0) {
    auto converted = jose_to_der(sig, alg.ec_half);
    if (!converted) return false;
    der = std::move(*converted);
    sig = der;
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, alg.md(), nullptr, key) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

// jwtf's number comparisons: a claim that is not a number is never in the past nor future.
bool is_before(const OJson& claim, std::int64_t now) {
  return claim.is_number() && claim.get<double>() < static_cast<double>(now);
}
bool is_after(const OJson& claim, std::int64_t now) {
  return claim.is_number() && claim.get<double>() > static_cast<double>(now);
}

}  // namespace

JwtSettings jwt_settings(const config::Sections& values) {
  JwtSettings s;
  const auto auth = values.find("jwt_auth");
  auto get = [&](std::string_view key) -> std::optional<std::string> {
    if (auth == values.end()) return std::nullopt;
    const auto it = auth->second.find(std::string(key));
    if (it == auth->second.end()) return std::nullopt;
    return it->second;
  };
  s.misconfigured = !parse_required_claims(get("required_claims").value_or("exp"), s);
  if (auto path = get("roles_claim_path")) s.roles_path = split_claim_path(*path);
  if (auto name = get("roles_claim_name")) s.roles_claim_name = *name;
  if (const auto keys = values.find("jwt_keys"); keys != values.end()) {
    for (const auto& [name, value] : keys->second) {
      const auto colon = name.find(':');
      if (colon == std::string::npos) continue;
      const std::string kty = name.substr(0, colon);
      JwtKey key;
      if (kty == "hmac") {
        auto secret = core::base64_decode(value);
        if (secret)
          key.hmac_secret = std::move(*secret);
        else
          key.error = "Not a valid key";
      } else if (kty == "rsa" || kty == "ec") {
        key = public_key(kty, value);
      } else {
        continue;
      }
      s.keys.emplace(name, std::move(key));
    }
  }
  return s;
}

std::variant<core::UserCtx, core::CouchError> verify_jwt(std::string_view token,
                                                         const JwtSettings& s, std::int64_t now) {
  if (s.misconfigured) return core::err::misconfigured_server("JWT is not configured correctly");
  const auto dot1 = token.find('.');
  const auto dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos)
    return core::err::bad_request("Malformed token");
  const std::string_view header_b64 = token.substr(0, dot1);
  const std::string_view payload_b64 = token.substr(dot1 + 1, dot2 - dot1 - 1);
  const std::string_view sig_b64 = token.substr(dot2 + 1);

  const auto header = decode_part(header_b64);
  if (!header) return core::err::bad_request("Malformed token");
  if (!header->is_object()) return core::err::bad_request("Not an object");
  // typ: checked when required; a present one must be "JWT" then.
  const OJson* typ = member(*header, "typ");
  if (required(s, "typ") != nullptr) {
    if (typ == nullptr) return core::err::bad_request("Missing typ header parameter");
    if (*typ != "JWT") return core::err::bad_request("Invalid typ header parameter");
  }
  const OJson* alg_claim = member(*header, "alg");
  if (alg_claim == nullptr) return core::err::bad_request("Missing alg header parameter");
  const Alg* alg =
      alg_claim->is_string() ? find_alg(alg_claim->get_ref<const std::string&>()) : nullptr;
  if (alg == nullptr) return core::err::bad_request("Invalid alg header parameter");

  const auto claims = decode_part(payload_b64);
  if (!claims) return core::err::bad_request("Malformed token");
  if (!claims->is_object()) return core::err::bad_request("Not an object");
  if (const auto* iss = required(s, "iss")) {
    const OJson* actual = member(*claims, "iss");
    if (actual == nullptr) return core::err::bad_request("Missing iss claim");
    if (!iss->has_value() || *actual != **iss) return core::err::bad_request("Invalid iss claim");
  }
  if (required(s, "iat") != nullptr) {
    const OJson* iat = member(*claims, "iat");
    if (iat == nullptr) return core::err::bad_request("Missing iat claim");
    if (!iat->is_number_integer()) return core::err::bad_request("Invalid iat claim");
  }
  if (required(s, "nbf") != nullptr) {
    const OJson* nbf = member(*claims, "nbf");
    if (nbf == nullptr) return core::err::bad_request("Missing nbf claim");
    if (!is_before(*nbf, now)) return core::err::unauthorized("nbf not in past");
  }
  if (required(s, "exp") != nullptr) {
    const OJson* exp = member(*claims, "exp");
    if (exp == nullptr) return core::err::bad_request("Missing exp claim");
    if (!is_after(*exp, now)) return core::err::unauthorized("exp not in future");
  }

  // The key: [jwt_keys] <kty>:<kid>, kid "_default" when the header names none.
  const OJson* kid = member(*header, "kid");
  if (kid == nullptr && required(s, "kid") != nullptr)
    return core::err::bad_request("Missing kid claim");
  std::string kid_text = "_default";
  if (kid != nullptr) {
    if (!kid->is_string()) return core::err::bad_request("Unknown kid");
    kid_text = kid->get<std::string>();
  }
  const auto key = s.keys.find(std::string(alg->kty) + ":" + kid_text);
  if (key == s.keys.end()) return core::err::bad_request("Unknown kid");
  if (key->second.error) return core::err::bad_request(*key->second.error);

  const auto sig = core::base64url_decode(sig_b64);
  const std::string_view message = token.substr(0, dot2);
  if (alg->kty == "hmac") {
    if (!sig || !verify_hmac(*alg, key->second.hmac_secret, message, *sig))
      return core::err::bad_request("Bad HMAC");
  } else if (!sig || !verify_signature(*alg, static_cast<EVP_PKEY*>(key->second.public_key.get()),
                                       message, *sig)) {
    return core::err::bad_request("Bad signature");
  }

  // Roles: a list of strings, or one comma-separated string.
  const OJson* roles = nullptr;
  if (s.roles_path) {
    roles = claims.operator->();
    for (const std::string& step : *s.roles_path) {
      roles = roles->is_object() ? member(*roles, step) : nullptr;
      if (roles == nullptr) break;
    }
  } else {
    roles = member(*claims, s.roles_claim_name);
  }
  core::UserCtx user;
  if (roles != nullptr) {
    if (roles->is_string()) {
      user.roles = split_roles(roles->get_ref<const std::string&>());
    } else if (roles->is_array()) {
      for (const OJson& r : *roles) {
        if (!r.is_string()) return core::err::bad_request("Malformed token");
        user.roles.push_back(r.get<std::string>());
      }
    } else {
      return core::err::bad_request("Malformed token");
    }
  }
  const OJson* sub = member(*claims, "sub");
  if (sub == nullptr) return core::err::unauthorized("Token missing sub claim.");
  if (!sub->is_string()) return core::err::bad_request("Malformed token");
  user.name = sub->get<std::string>();
  return user;
}

}  // namespace chaise::http
