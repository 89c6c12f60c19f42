// libFuzzer target: JWT bearer tokens (http/jwt). The settings have an HMAC key, an EC key and an
// RSA key, a malformed key and a nested roles path; any token must come back as a user or a
// CouchDB error (400, 401), never anything else.
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "http/auth/jwt.h"

namespace {

std::string public_pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(len));
  BIO_free(bio);
  return pem;
}

const chaise::http::JwtSettings& settings() {
  static const chaise::http::JwtSettings s = [] {
    EVP_PKEY* ec = EVP_EC_gen("P-256");
    EVP_PKEY* rsa = EVP_RSA_gen(1024);
    chaise::config::Sections values;
    values["jwt_keys"]["hmac:_default"] = "c2VjcmV0";  // "secret"
    values["jwt_keys"]["hmac:bad"] = "!!";
    values["jwt_keys"]["ec:e"] = public_pem(ec);
    values["jwt_keys"]["rsa:r"] = public_pem(rsa);
    values["jwt_auth"]["required_claims"] = "exp, nbf, {iss, \"me\"}";
    values["jwt_auth"]["roles_claim_path"] = "a.b\\.c";
    EVP_PKEY_free(ec);
    EVP_PKEY_free(rsa);
    return chaise::http::jwt_settings(values);
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view token(reinterpret_cast<const char*>(data), size);
  auto r = chaise::http::verify_jwt(token, settings(), 1'700'000'000);
  if (auto* e = std::get_if<chaise::core::CouchError>(&r)) {
    if (e->status != 400 && e->status != 401) std::abort();
  }
  return 0;
}
