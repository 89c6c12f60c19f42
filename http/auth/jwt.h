// http/auth/jwt.h — JSON Web Tokens (Authorization: Bearer) as CouchDB 3.5's jwt_authentication_handler
// checks them (couch_httpd_auth, jwtf, jwtf_keystore): HS256/384/512 with keys from [jwt_keys]
// hmac:<kid> (base64), RS256/384/512 and ES256/384/512 with PEM public keys from [jwt_keys]
// rsa:<kid> / ec:<kid> ("\n" may be written as the two characters \ and n); the claims
// [jwt_auth] required_claims names; the user from "sub" and roles from roles_claim_path or
// roles_claim_name. Signatures are checked with OpenSSL.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"
#include "core/security/security.h"
#include "core/util/error.h"

namespace chaise::http {

// A [jwt_keys] entry, decoded when the settings are read: the key, or why it cannot be used
// (reported only to a token that names it, as CouchDB does).
struct JwtKey {
  std::string hmac_secret;           // hmac:<kid>
  std::shared_ptr<void> public_key;  // rsa:/ec:<kid>: an EVP_PKEY
  std::optional<std::string> error;  // "Not a valid key", "not an RSA public key", ...
};

struct JwtSettings {
  // required_claims: exp, iat, nbf, kid, typ, iss (value: nullopt) or {iss, "value"} pairs.
  std::vector<std::pair<std::string, std::optional<std::string>>> required = {
      {"exp", std::nullopt}};
  // required_claims could not be read (CouchDB: 500 misconfigured_server).
  bool misconfigured = false;
  // roles_claim_path split at unescaped dots; nullopt: roles_claim_name, a top-level claim.
  std::optional<std::vector<std::string>> roles_path;
  std::string roles_claim_name = "_couchdb.roles";
  std::map<std::string, JwtKey, std::less<>> keys;  // "hmac:_default", "rsa:kid", ...
};

JwtSettings jwt_settings(const config::Sections& values);

// The user a bearer token names, or CouchDB's error for it (400 bad_request for a malformed or
// badly signed token, 401 unauthorized for an expired one or one without "sub").
std::variant<core::UserCtx, core::CouchError> verify_jwt(std::string_view token,
                                                         const JwtSettings& s,
                                                         std::int64_t now_seconds);

}  // namespace chaise::http
