// core/util/digest.h — MD5 and SHA-256 digests: raw bytes (revision hashes, the password cache) and
// MD5 as 32 lowercase hex digits (CouchDB's view signatures), SHA-1 (Mango's default index names).
//
// Through OpenSSL's EVP with each algorithm fetched once and a context kept per thread: OpenSSL
// 3's one-shot calls (EVP_Digest, SHA256) look the algorithm up and allocate a context on every
// call, which was most of a small digest's cost (callgrind: 5.7k instructions per revision hash,
// of which MD5 itself is under 1k). A failure of OpenSSL is a broken installation, not an input
// error: these abort.
#pragma once

#include <string>
#include <string_view>

namespace chaise::core {

// 16 bytes.
std::string md5(std::string_view data);
// 20 bytes.
std::string sha1(std::string_view data);
// 32 bytes.
std::string sha256(std::string_view data);
// md5(data) as 32 lowercase hex digits.
std::string md5_hex(std::string_view data);
// Bytes as lowercase hex digits, two per byte.
std::string hex(std::string_view bytes);

}  // namespace chaise::core
