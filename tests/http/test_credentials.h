// Credentials that tests build themselves, as a client would: Basic headers, and the encodings and
// HMAC-SHA256 that JWTs and AuthSession cookies are made of (OpenSSL; a test that signs links
// OpenSSL::Crypto).
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <boost/beast/core/detail/base64.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chaise::test {

inline std::string base64(std::string_view bytes) {
  std::string out(boost::beast::detail::base64::encoded_size(bytes.size()), '\0');
  out.resize(boost::beast::detail::base64::encode(out.data(), bytes.data(), bytes.size()));
  return out;
}

// RFC 4648's URL alphabet without padding (JWTs, CouchDB's AuthSession cookie).
inline std::string base64url(std::string_view bytes) {
  std::string out = base64(bytes);
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

inline std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return {reinterpret_cast<const char*>(mac), len};
}

// The Authorization header of HTTP Basic.
inline std::pair<std::string, std::string> basic_auth(std::string_view user,
                                                      std::string_view password) {
  return {"Authorization", "Basic " + base64(std::string(user) + ":" + std::string(password))};
}

}  // namespace chaise::test
