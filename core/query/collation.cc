#include "core/query/collation.h"

#include <unicode/ucol.h>
#include <unicode/ustring.h>
#include <unicode/uversion.h>

#include <bit>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace chaise::core {

namespace {

struct CollatorCloser {
  void operator()(UCollator* c) const { ucol_close(c); }
};

UCollator* collator() {
  thread_local std::unique_ptr<UCollator, CollatorCloser> c = [] {
    UErrorCode status = U_ZERO_ERROR;
    UCollator* opened = ucol_open("", &status);
    if (U_FAILURE(status)) throw std::runtime_error("ICU: cannot open the root collator");
    return std::unique_ptr<UCollator, CollatorCloser>(opened);
  }();
  return c.get();
}

void append_sort_key(std::string& out, std::string_view utf8) {
  thread_local std::vector<UChar> u16;
  thread_local std::vector<uint8_t> key;
  UErrorCode status = U_ZERO_ERROR;
  int32_t len16 = 0;
  u16.resize(utf8.size() + 1);
  // Invalid UTF-8 (not possible from parsed JSON) becomes U+FFFD.
  u_strFromUTF8WithSub(u16.data(), static_cast<int32_t>(u16.size()), &len16, utf8.data(),
                       static_cast<int32_t>(utf8.size()), 0xFFFD, nullptr, &status);
  if (U_FAILURE(status)) len16 = 0;
  if (key.size() < 64) key.resize(64);
  int32_t n =
      ucol_getSortKey(collator(), u16.data(), len16, key.data(), static_cast<int32_t>(key.size()));
  if (n > static_cast<int32_t>(key.size())) {
    key.resize(static_cast<std::size_t>(n));
    n = ucol_getSortKey(collator(), u16.data(), len16, key.data(),
                        static_cast<int32_t>(key.size()));
  }
  // n counts the terminating zero byte, which is kept: it ends the string.
  out.append(reinterpret_cast<const char*>(key.data()), static_cast<std::size_t>(n));
}

void append_number(std::string& out, double d) {
  if (d == 0) d = 0;  // -0 collates as 0
  std::uint64_t bits = std::bit_cast<std::uint64_t>(d);
  bits = (bits & 0x8000'0000'0000'0000ull) ? ~bits : bits | 0x8000'0000'0000'0000ull;
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

template <typename Json>
void encode(std::string& out, const Json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      out.push_back('\x01');
      return;
    case nlohmann::json::value_t::boolean:
      out.push_back(v.template get<bool>() ? '\x03' : '\x02');
      return;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      out.push_back('\x04');
      append_number(out, v.template get<double>());
      return;
    case nlohmann::json::value_t::string:
      out.push_back('\x05');
      append_sort_key(out, v.template get_ref<const std::string&>());
      return;
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::binary:
      out.push_back('\x06');
      for (const auto& e : v) encode(out, e);
      out.push_back('\x00');
      return;
    case nlohmann::json::value_t::object:
      out.push_back('\x07');
      for (auto it = v.begin(); it != v.end(); ++it) {
        append_sort_key(out, it.key());
        encode(out, it.value());
      }
      out.push_back('\x00');
      return;
  }
}

}  // namespace

std::string string_sort_key(std::string_view utf8) {
  std::string out;
  append_sort_key(out, utf8);
  return out;
}

std::string collation_key(const nlohmann::json& value) {
  std::string out;
  encode(out, value);
  return out;
}

std::string collation_key(const nlohmann::ordered_json& value) {
  std::string out;
  encode(out, value);
  return out;
}

namespace {
// couch_util:version_to_binary: the parts joined with dots, trailing zero parts dropped.
std::string dotted(const UVersionInfo& v) {
  std::size_t n = U_MAX_VERSION_LENGTH;
  while (n > 1 && v[n - 1] == 0) --n;
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += '.';
    out += std::to_string(static_cast<unsigned>(v[i]));
  }
  return out;
}
}  // namespace

CollationVersions collation_versions() {
  UVersionInfo library{}, uca{}, col{};
  u_getVersion(library);
  ucol_getUCAVersion(collator(), uca);
  ucol_getVersion(collator(), col);
  return {dotted(library), dotted(uca), dotted(col)};
}

}  // namespace chaise::core
