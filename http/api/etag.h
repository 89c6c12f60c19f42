// http/api/etag.h — ETags for answers that are not documents (/_all_dbs, /_dbs_info, /_uuids,
// /{db}/_changes) and CouchDB's If-None-Match handling (chttpd:etag_match, etag_respond).
//
// CouchDB's values are opaque (the base-36 MD5 of an Erlang term); clients only compare them, so
// Chaise's are an opaque hash of whatever decides the answer. Header-only; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "http/api/router.h"

namespace chaise::http {

// Accumulates the inputs an answer depends on into a quoted ETag value ("\"<16 hex digits>\"").
// FNV-1a 64: not a security boundary, only a change detector; each part is length-prefixed so
// that ("ab","c") and ("a","bc") differ.
class EtagBuilder {
 public:
  EtagBuilder& add(std::string_view part) {
    const std::uint64_t n = part.size();
    for (int shift = 0; shift < 64; shift += 8) mix(static_cast<unsigned char>(n >> shift));
    for (unsigned char c : part) mix(c);
    return *this;
  }
  std::string str() const {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string etag = "\"";
    for (int shift = 60; shift >= 0; shift -= 4) etag.push_back(kHex[(hash_ >> shift) & 0xf]);
    return etag + "\"";
  }

 private:
  void mix(unsigned char c) { hash_ = (hash_ ^ c) * 1099511628211ULL; }
  std::uint64_t hash_ = 1469598103934665603ULL;
};

// chttpd:etag_match: true if one of the If-None-Match tokens (split on ',' and ' ', a "W/" prefix
// ignored) is `etag`.
inline bool if_none_match_has(const Request& req, std::string_view etag) {
  std::string_view v = req[beast_http::field::if_none_match];
  while (!v.empty()) {
    const std::size_t end = v.find_first_of(", ");
    std::string_view token = v.substr(0, end);
    v = end == std::string_view::npos ? std::string_view{} : v.substr(end + 1);
    if (token.starts_with("W/")) token.remove_prefix(2);
    if (!token.empty() && token == etag) return true;
  }
  return false;
}

// chttpd:etag_respond's answer when the client has it: 304 with the ETag and nothing else.
inline Response not_modified_response(const Request& req, std::string_view etag) {
  Response r{Status::not_modified, req.version()};
  r.set(beast_http::field::server, kServerHeader);
  r.set(beast_http::field::date, http_date_now());
  r.set(beast_http::field::etag, etag);
  r.keep_alive(req.keep_alive());
  r.prepare_payload();
  return r;
}

}  // namespace chaise::http
