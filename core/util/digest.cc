#include "core/util/digest.h"

#include <openssl/evp.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace chaise::core {
namespace {

[[noreturn]] void openssl_failed(const char* what) {
  std::fprintf(stderr, "chaise: OpenSSL %s failed\n", what);
  std::abort();
}

// The algorithm named `name`, fetched on first use and kept for the process's lifetime.
const EVP_MD* fetched(const char* name) {
  EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
  if (md == nullptr) openssl_failed(name);
  return md;
}

std::string digest(const EVP_MD* md, std::string_view data, const char* name) {
  struct Ctx {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Ctx() { EVP_MD_CTX_free(ctx); }
  };
  thread_local Ctx c;
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  if (c.ctx == nullptr || EVP_DigestInit_ex2(c.ctx, md, nullptr) != 1 ||
      EVP_DigestUpdate(c.ctx, data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(c.ctx, out.data(), &len) != 1) {
    openssl_failed(name);
  }
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

}  // namespace

std::string md5(std::string_view data) {
  static const EVP_MD* const md = fetched("MD5");
  return digest(md, data, "MD5");
}

std::string sha256(std::string_view data) {
  static const EVP_MD* const md = fetched("SHA256");
  return digest(md, data, "SHA256");
}

std::string sha1(std::string_view data) {
  static const EVP_MD* const md = fetched("SHA1");
  return digest(md, data, "SHA1");
}

std::string hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string md5_hex(std::string_view data) { return hex(md5(data)); }

}  // namespace chaise::core
