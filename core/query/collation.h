// core/query/collation.h — CouchDB's view collation as byte strings that sort with memcmp.
//
// CouchDB orders view keys with couch_ejson_compare: null < false < true < numbers < strings <
// arrays < objects; numbers by value; strings by ICU's root collator (Unicode Collation
// Algorithm, tertiary strength) as ucol_strcoll compares them; arrays element by element, a
// shorter prefix first; objects member by member (key by the string collation, then value), fewer
// members first. collation_key() turns a JSON value into bytes whose unsigned lexicographic order
// is that order, so a view's rows can be stored ordered in the key-value store and a key range is
// a byte range.
//
// Encoding: one tag byte per value (0x01 null, 0x02 false, 0x03 true, 0x04 number, 0x05 string,
// 0x06 array, 0x07 object); a number is 8 bytes of its double made order-preserving (-0 as 0);
// a string is its ICU sort key, which has no zero byte, then 0x00; arrays and objects end with
// 0x00, which sorts before every tag, so a prefix sorts first. Objects encode each member as the
// key's sort key + 0x00, then the value.
//
// Two keys collate equal exactly when their encodings are equal (ICU gives equal sort keys to
// strings it compares equal), which is how group=true groups. Not reversible: store the JSON too.
//
// Contract: thread-safe (one collator per thread), never throws except std::bad_alloc, recursion
// bounded by the depth of the value (callers bound that: request JSON at kJsonDepthMax).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace chaise::core {

std::string collation_key(const nlohmann::json& value);
std::string collation_key(const nlohmann::ordered_json& value);

// The sort key alone for a UTF-8 string (what collation_key puts after the 0x05 tag).
std::string string_sort_key(std::string_view utf8);

// The versions that decide the collation, as CouchDB's GET /_node/{node}/_versions names them
// ("collation_driver"): ICU's library, the Unicode Collation Algorithm and the root collator,
// each dotted without its trailing zero parts ("72.1", "15", "153.120"). Index files built under
// another collator version may order keys differently.
struct CollationVersions {
  std::string library_version;
  std::string collation_algorithm_version;
  std::string collator_version;
};
CollationVersions collation_versions();

// memcmp order of two encodings: < 0, 0, > 0.
inline int collate(std::string_view a, std::string_view b) { return a.compare(b); }

// The first `level` elements of an array key (group_level); any other value as it is.
template <typename Json>
Json group_key(const Json& key, std::size_t level) {
  if (!key.is_array() || key.size() <= level) return key;
  return Json(key.begin(), key.begin() + static_cast<std::ptrdiff_t>(level));
}

}  // namespace chaise::core
