// core/json_text.cc — see json_text.h.
#include "core/json_text.h"

#include <algorithm>
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

std::variant<Json, std::string> parse_json_text(std::string_view text, JsonNumbers numbers) {
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

void JsonWriter::string(std::string_view s) {
  if (!is_plain_json_string(s)) {
    serializer_.dump(Json(std::string(s)), false, false, 0);
    return;
  }
  out_.push_back('"');
  out_.append(s);
  out_.push_back('"');
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
    case Json::value_t::binary:
      if (is_number_text(j)) {
        out_ += number_text(j);
        return;
      }
      [[fallthrough]];
    default:
      serializer_.dump(j, false, false, 0);
  }
}

}  // namespace chaise::core
