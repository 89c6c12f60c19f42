// libFuzzer target: the request target (http/request_parse): path segments, the query string and
// every typed query parameter getter (integers, booleans, JSON values such as startkey and keys).
// Malformed input may only be answered with an HttpError (a 400), never anything else.
#include <cstdint>
#include <string>
#include <string_view>

#include "http/transport/request_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  (void)chaise::http::path_segments(target);
  try {
    const auto query = chaise::http::Query::parse(target);
    for (const auto& [key, value] : query.params()) {
      try {
        (void)query.get_int(key);
      } catch (const chaise::http::HttpError&) {
      }
      try {
        (void)query.get_bool(key, false);
      } catch (const chaise::http::HttpError&) {
      }
      try {
        (void)query.get_json(key);
      } catch (const chaise::http::HttpError&) {
      }
    }
  } catch (const chaise::http::HttpError&) {
  }
  return 0;
}
