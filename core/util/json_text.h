// core/util/json_text.h — JSON text from clients to values, and document values back to text.
//
// One parser for every JSON text a client sends (bodies, query parameters, multipart document
// parts). Compared with nlohmann's own parse() it:
// - costs O(n log n) at worst for objects with many members (nlohmann's ordered_json looks each new
//   member up in a list, which is quadratic: an 80,000-id _revs_diff body took 29 s);
// - bounds nesting (kJsonDepthMax) while parsing, so recursive code never sees deeper values;
// - says what is wrong ("invalid UTF-8 JSON: <what> at byte N") instead of one fixed reason;
// - with JsonNumbers::exact, keeps the text of numbers a double cannot hold (integers beyond
//   64 bits, non-zero values that would underflow to 0) as "number text" values, so that a stored
//   document reads back with the digits it was written with (CouchDB keeps big integers exactly).
//
// Duplicate member names keep the first position and the last value, as nlohmann's parse() does.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

namespace chaise::core {

// Nesting deeper than this is refused (recursive serializers and collation must not overflow).
inline constexpr int kJsonDepthMax = 512;

enum class JsonNumbers {
  doubles,  // every non-integer or out-of-range number becomes a double (as nlohmann does)
  exact,    // numbers a double would change are kept as number text (see is_number_text)
};

// The value, or the reason it is not JSON (e.g. "invalid UTF-8 JSON: number out of range at
// byte 7"). Numbers that overflow a double (1e400) are refused in both modes, as CouchDB does.
std::variant<nlohmann::ordered_json, std::string> parse_json_text(std::string_view text,
                                                                  JsonNumbers numbers);

// The JSON string rules both JSON readers share (parse_json_text's and couch_rev's jiffy reader).
// The length of the well-formed UTF-8 sequence of 2 to 4 bytes (RFC 3629: no overlong forms,
// surrogates or code points above U+10FFFF) at the start of `s`; 0 when there is none.
std::size_t utf8_sequence_length(std::string_view s);
// Decodes the escape at text[pos] (a backslash) onto `out` as UTF-8 and moves `pos` past it:
// \" \\ \/ \b \f \n \r \t and \uXXXX, where \uD800-\uDBFF must be followed by a \uDC00-\uDFFF
// escape (the pair is one code point). Anything else, a lone surrogate included: false.
bool decode_json_escape(std::string_view text, std::size_t& pos, std::string& out);

namespace detail {
// parse_json_text() through nlohmann's own lexer: the same answer, slower (parse_json_text reads
// well-formed text itself and hands everything else to this). For tests and fuzzers.
std::variant<nlohmann::ordered_json, std::string> parse_json_text_with_nlohmann(
    std::string_view text, JsonNumbers numbers);
}  // namespace detail

// True for a number kept as text by JsonNumbers::exact (stored as a binary value with a private
// subtype; nlohmann never produces binary values from JSON text).
bool is_number_text(const nlohmann::ordered_json& j);
// The digits of a number text value.
std::string_view number_text(const nlohmann::ordered_json& j);

// Compact JSON of `j` as nlohmann's dump() writes it, except that number text values are written
// as their original digits. Throws nlohmann::json::type_error on invalid UTF-8 in strings when
// `strict` (as dump() with error_handler_t::strict), else replaces invalid bytes.
std::string dump_json(const nlohmann::ordered_json& j, bool strict = true);

// True when `s` is printable ASCII without quotes or backslashes: its JSON string literal is `s`
// in quotes. Ids, revisions, sequences and member names nearly always are.
bool is_plain_json_string(std::string_view s);

// Appends compact JSON to `out`, as dump_json writes it, many values with one serializer: each
// dump() builds its own (a locale lookup, a buffer), which was 5% of a PUT when a document body
// was written member by member. `out` must outlive the writer; the caller may append to it
// between calls (punctuation).
class JsonWriter {
 public:
  JsonWriter(std::string& out, bool strict);
  void value(const nlohmann::ordered_json& j);
  // A string literal: as it is when is_plain_json_string (most member names), anything else
  // escaped by the serializer.
  void string(std::string_view s);

 private:
  // Appends `s` quoted if it is plain (is_plain_json_string); false, appending nothing, if not.
  bool plain_string(std::string_view s);

  std::string& out_;
  nlohmann::detail::serializer<nlohmann::ordered_json> serializer_;
};

}  // namespace chaise::core
