// core/util/json_text.cc — see json_text.h.
#include "core/util/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;
using Members = std::vector<std::pair<const std::string, Json>>;  // ordered_map's base

// The binary subtype that marks a number kept as text ('N').
constexpr std::uint8_t kNumberTextSubtype = 0x4e;
// Objects up to this many members find duplicates by a linear scan; larger ones by a hash index.
constexpr std::size_t kLinearMembers = 16;

Members& members(Json& object) { return *object.get_ptr<Json::object_t*>(); }

// True if a number literal is an integer (no fraction, no exponent).
bool integer_literal(std::string_view text) {
  return text.find_first_of(".eE") == std::string_view::npos;
}

// True if the mantissa of a number literal has a non-zero digit (so its value is not zero).
bool nonzero_literal(std::string_view text) {
  for (char c : text) {
    if (c == 'e' || c == 'E') break;
    if (c >= '1' && c <= '9') return true;
  }
  return false;
}

// The parser's message without the bytes it last read (client bytes, maybe not UTF-8).
std::string describe(const nlohmann::detail::exception& ex) {
  if (ex.id == 406) return "number out of range";
  std::string what = ex.what();
  // "[json.exception.parse_error.101] parse error at line 1, column 6: syntax error while parsing
  // value - invalid literal; last read: '...'; expected ..."
  std::string out = "syntax error";
  if (auto dash = what.find(" - "); dash != std::string::npos) {
    std::string detail = what.substr(dash + 3);
    if (auto last = detail.find("; last read: "); last != std::string::npos) detail.resize(last);
    out += ": " + detail;
  }
  for (char& c : out) {
    if (static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return out;
}

// Builds the value as nlohmann's DOM parser does, with the differences listed in json_text.h.
class Builder {
 public:
  explicit Builder(JsonNumbers numbers) : numbers_(numbers) {}

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(std::int64_t v) { return put(Json(v)); }
  bool number_unsigned(std::uint64_t v) { return put(Json(v)); }
  bool number_float(double v, const std::string& text) {
    if (numbers_ == JsonNumbers::exact &&
        (integer_literal(text) || (v == 0.0 && nonzero_literal(text)))) {
      return put(
          Json::binary(std::vector<std::uint8_t>(text.begin(), text.end()), kNumberTextSubtype));
    }
    return put(Json(v));
  }
  bool string(std::string& v) { return put(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return false; }  // never produced from JSON text

  bool start_object(std::size_t) { return open(Json::object()); }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    Members& m = members(*f.value);
    std::optional<std::size_t> at;
    if (f.index) {
      if (auto it = f.index->find(k); it != f.index->end()) at = it->second;
    } else {
      for (std::size_t i = 0; i < m.size(); ++i) {
        if (m[i].first == k) {
          at = i;
          break;
        }
      }
    }
    if (at) {  // a duplicate name: keeps its place, takes the new value
      m[*at].second = Json();
      f.element = &m[*at].second;
      return true;
    }
    if (!f.index && m.size() >= kLinearMembers) {
      f.index = std::make_unique<std::unordered_map<std::string, std::size_t>>();
      for (std::size_t i = 0; i < m.size(); ++i) f.index->emplace(m[i].first, i);
    }
    if (f.index) f.index->emplace(k, m.size());
    m.emplace_back(std::move(k), Json());
    f.element = &m.back().second;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) {
    if (error_.empty()) error_ = describe(ex) + " at byte " + std::to_string(position);
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    Json* value;
    Json* element = nullptr;  // objects: where the value of the last key goes
    std::unique_ptr<std::unordered_map<std::string, std::size_t>> index;
  };

  // Stores a scalar or a new container where the grammar says; returns where it went.
  Json* place(Json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      auto& a = *f.value->get_ptr<Json::array_t*>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *f.element = std::move(v);
    return f.element;
  }
  bool put(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    if (static_cast<int>(frames_.size()) >= kJsonDepthMax) {
      if (error_.empty())
        error_ = "nested deeper than " + std::to_string(kJsonDepthMax) + " levels";
      return false;
    }
    frames_.push_back(Frame{place(std::move(container)), nullptr, nullptr});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }

  JsonNumbers numbers_;
  Json root_;
  std::vector<Frame> frames_;
  std::string error_;
};

// Reads well-formed JSON text into a Builder, as nlohmann's SAX parser would feed it, without
// nlohmann's lexer (a character at a time through an input adapter, every token copied into a
// buffer): that lexer was most of a PUT's 24k parsing instructions. It gives up at anything it
// does not read fast: every syntax error, a byte order mark, a number its conversion cannot
// represent exactly as strtod would (under- or overflow). parse_json_text then parses the text
// with nlohmann, which answers the value or the error message.
class FastReader {
 public:
  FastReader(std::string_view text, Builder& b)
      : p_(text.data()), end_(text.data() + text.size()), b_(b) {}

  bool document() {
    skip_space();
    if (!value()) return false;
    skip_space();
    return p_ == end_;
  }

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      return false;
    p_ += word.size();
    return true;
  }

  bool value() {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{':
        return object();
      case '[':
        return array();
      case '"': {
        std::string s;
        return string(s) && b_.string(s);
      }
      case 't':
        return literal("true") && b_.boolean(true);
      case 'f':
        return literal("false") && b_.boolean(false);
      case 'n':
        return literal("null") && b_.null();
      default:
        return number();
    }
  }

  bool object() {
    ++p_;  // '{'
    if (!b_.start_object(0)) return false;
    skip_space();
    if (eat('}')) return b_.end_object();
    do {
      skip_space();
      std::string key;
      if (p_ == end_ || *p_ != '"' || !string(key) || !b_.key(key)) return false;
      skip_space();
      if (!eat(':')) return false;
      skip_space();
      if (!value()) return false;
      skip_space();
    } while (eat(','));
    return eat('}') && b_.end_object();
  }

  bool array() {
    ++p_;  // '['
    if (!b_.start_array(0)) return false;
    skip_space();
    if (eat(']')) return b_.end_array();
    do {
      skip_space();
      if (!value()) return false;
      skip_space();
    } while (eat(','));
    return eat(']') && b_.end_array();
  }

  // JSON's number grammar, converted as nlohmann's lexer does: an integer literal to uint64
  // (int64 when negative) when it fits, anything else to the double strtod gives.
  bool number() {
    const char* start = p_;
    const bool negative = eat('-');
    if (eat('0')) {
    } else if (p_ != end_ && *p_ >= '1' && *p_ <= '9') {
      while (p_ != end_ && is_digit(*p_)) ++p_;
    } else {
      return false;
    }
    bool integer = true;
    if (eat('.')) {
      integer = false;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    if (integer) {
      if (negative) {
        std::int64_t v = 0;
        if (auto r = std::from_chars(start, p_, v); r.ec == std::errc() && r.ptr == p_)
          return b_.number_integer(v);
      } else {
        std::uint64_t v = 0;
        if (auto r = std::from_chars(start, p_, v); r.ec == std::errc() && r.ptr == p_)
          return b_.number_unsigned(v);
      }
    }
    double d = 0;
    const auto r = std::from_chars(start, p_, d);
    if (r.ec != std::errc() || r.ptr != p_ || !std::isfinite(d)) return false;
    return b_.number_float(d, std::string(start, p_));
  }

  // After the opening quote is at p_: the string's bytes, escapes decoded, into `out`.
  bool string(std::string& out) {
    ++p_;
    for (;;) {
      const char* run = p_;
      while (p_ != end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
        ++p_;
      }
      out.append(run, p_);
      if (p_ == end_) return false;
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        std::size_t at = 0;
        if (!decode_json_escape(rest(), at, out)) return false;
        p_ += at;
        continue;
      }
      const std::size_t len = utf8_sequence_length(rest());
      if (len == 0) return false;
      out.append(p_, p_ + len);
      p_ += len;
    }
  }

  std::string_view rest() const { return {p_, static_cast<std::size_t>(end_ - p_)}; }

  const char* p_;
  const char* end_;
  Builder& b_;
};

bool has_number_text(const Json& j) {
  switch (j.type()) {
    case Json::value_t::binary:
      return is_number_text(j);
    case Json::value_t::object:
      for (const auto& [k, v] : j.items()) {
        if (has_number_text(v)) return true;
      }
      return false;
    case Json::value_t::array:
      for (const Json& v : j) {
        if (has_number_text(v)) return true;
      }
      return false;
    default:
      return false;
  }
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = at(0);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {      // C0 and C1 only start overlong forms
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < len || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t i = 2; i < len; ++i) {
    if ((at(i) & 0xC0) != 0x80) return 0;
  }
  return len;
}

bool decode_json_escape(std::string_view text, std::size_t& pos, std::string& out) {
  const auto hex4 = [&]() -> int {
    if (text.size() - pos < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text[pos++];
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  };
  if (text.size() - pos < 2) return false;
  const char c = text[pos + 1];
  pos += 2;
  static constexpr std::string_view kEscaped = "\"\\/bfnrt";
  static constexpr std::string_view kDecoded = "\"\\/\b\f\n\r\t";
  if (c != 'u') {
    const std::size_t i = kEscaped.find(c);
    if (i == std::string_view::npos) return false;
    out.push_back(kDecoded[i]);
    return true;
  }
  int cp = hex4();
  if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;  // a lone low surrogate
  if (cp >= 0xD800 && cp <= 0xDBFF) {                          // needs its low surrogate
    if (text.substr(pos, 2) != "\\u") return false;
    pos += 2;
    const int low = hex4();
    if (low < 0xDC00 || low > 0xDFFF) return false;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }
  const auto u = static_cast<std::uint32_t>(cp);
  if (u < 0x80) {
    out.push_back(static_cast<char>(u));
  } else if (u < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (u >> 6)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  } else if (u < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (u >> 12)));
    out.push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (u >> 18)));
    out.push_back(static_cast<char>(0x80 | ((u >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  }
  return true;
}

std::variant<Json, std::string> parse_json_text(std::string_view text, JsonNumbers numbers) {
  {
    Builder b(numbers);
    if (FastReader(text, b).document()) return std::move(b.root());
  }
  return detail::parse_json_text_with_nlohmann(text, numbers);
}

std::variant<Json, std::string> detail::parse_json_text_with_nlohmann(std::string_view text,
                                                                      JsonNumbers numbers) {
  Builder b(numbers);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &b, Json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    return "invalid UTF-8 JSON: " + (b.error().empty() ? std::string("syntax error") : b.error());
  }
  return std::move(b.root());
}

bool is_number_text(const Json& j) {
  return j.is_binary() && j.get_binary().has_subtype() &&
         j.get_binary().subtype() == kNumberTextSubtype;
}

std::string_view number_text(const Json& j) {
  const auto& bytes = j.get_binary();
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string dump_json(const Json& j, bool strict) {
  const auto handler = strict ? Json::error_handler_t::strict : Json::error_handler_t::replace;
  if (!has_number_text(j)) return j.dump(-1, ' ', false, handler);
  std::string out;
  JsonWriter(out, strict).value(j);
  return out;
}

JsonWriter::JsonWriter(std::string& out, bool strict)
    : out_(out),
      serializer_(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                  strict ? Json::error_handler_t::strict : Json::error_handler_t::replace) {}

bool is_plain_json_string(std::string_view s) {
  // Eight bytes at a time (ids, revisions and member names are mostly longer than that): a word
  // is plain when none of its bytes is below 0x20, has the high bit set, or is 0x7f, '"' or '\\'.
  // Each test is the exact "has a zero byte" test, (v - 0x01..) & ~v & 0x80.., applied to v.
  constexpr std::uint64_t kOnes = 0x0101010101010101ull;
  constexpr std::uint64_t kHighs = 0x8080808080808080ull;
  auto has_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHighs; };
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    const std::uint64_t bad = ((w - kOnes * 0x20) & ~w & kHighs) | (w & kHighs) |
                              has_zero(w ^ (kOnes * 0x7f)) | has_zero(w ^ (kOnes * '"')) |
                              has_zero(w ^ (kOnes * '\\'));
    if (bad != 0) return false;
  }
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
  }
  return true;
}

namespace {
template <typename Int>
void append_decimal(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}
}  // namespace

bool JsonWriter::plain_string(std::string_view s) {
  if (!is_plain_json_string(s)) return false;
  out_.push_back('"');
  out_.append(s);
  out_.push_back('"');
  return true;
}

void JsonWriter::string(std::string_view s) {
  if (!plain_string(s)) serializer_.dump(Json(std::string(s)), false, false, 0);
}

void JsonWriter::value(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object: {
      out_.push_back('{');
      bool first = true;
      for (const auto& [k, v] : *j.get_ptr<const Json::object_t*>()) {
        if (!first) out_.push_back(',');
        first = false;
        string(k);
        out_.push_back(':');
        value(v);
      }
      out_.push_back('}');
      return;
    }
    case Json::value_t::array: {
      out_.push_back('[');
      bool first = true;
      for (const Json& v : j) {
        if (!first) out_.push_back(',');
        first = false;
        value(v);
      }
      out_.push_back(']');
      return;
    }
    case Json::value_t::string:
      if (!plain_string(j.get_ref<const std::string&>())) serializer_.dump(j, false, false, 0);
      return;
    case Json::value_t::number_integer:
      append_decimal(out_, j.get<std::int64_t>());
      return;
    case Json::value_t::number_unsigned:
      append_decimal(out_, j.get<std::uint64_t>());
      return;
    case Json::value_t::boolean:
      out_ += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::null:
      out_ += "null";
      return;
    case Json::value_t::binary:
      if (is_number_text(j)) {
        out_ += number_text(j);
        return;
      }
      [[fallthrough]];
    default:  // floats (their shortest round-trip form), a binary that is not number text
      serializer_.dump(j, false, false, 0);
  }
}

}  // namespace chaise::core
