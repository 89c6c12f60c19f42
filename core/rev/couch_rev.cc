// core/rev/couch_rev.cc — CouchDB 3.x's revision hash (couch_db:new_revid/1), byte for byte.
//
// The hash is MD5 over term_to_binary([Deleted, OldStart, OldRev, Body, Atts2],
// [{minor_version, 1}]), i.e. over this subset of Erlang's external term format (ETF). Tags are
// single bytes; u16/u32/i32 are big-endian.
//
//   input     := 131 108 u32(5) deleted old_start old_rev body atts 106
//   deleted   := atom("true") | atom("false")
//   old_start := integer(parent pos)                 0 for a new document
//   old_rev   := binary(parent hash)                 raw bytes: 16 for a 32-hex-digit hash
//              | integer(0)                          a new document
//   atts      := 106                                 no attachments
//              | 108 u32(n) {104 3 binary(name) binary(type) binary(md5)}*n 106
//                                                    LAST attachment first (CouchDB's foldl)
//   body      := object
//   object    := 104 1 106                           {[]}
//              | 104 1 108 u32(n) {104 2 binary(key) value}*n 106      {[{K, V}, ...]}
//   value     := object | array | binary(string) | integer | float
//              | atom("true") | atom("false") | atom("null")
//   array     := 106                                 []
//              | 107 u16(n) byte*n                   STRING_EXT: every element an integer 0..255,
//                                                    n <= 65535 (ETF's encoding of such lists)
//              | 108 u32(n) value*n 106
//   atom(a)   := 100 u16(len) a                      ATOM_EXT (minor_version 1 keeps the Latin-1
//                                                    form on OTP 26+ too)
//   binary(b) := 109 u32(len) b
//   integer   := 97 byte                             0..255            SMALL_INTEGER_EXT
//              | 98 i32                              -2^31..2^31-1     INTEGER_EXT
//              | 110 n:byte sign magnitude           beyond int32      SMALL_BIG_EXT
//                                                    sign 0|1; magnitude n bytes, little-endian,
//                                                    no high zero bytes. n <= 128: CouchDB fails
//                                                    (500) on integers Erlang cannot convert to
//                                                    a finite double, so LARGE_BIG_EXT (n > 255)
//                                                    never occurs.
//   float     := 70 ieee754-binary64 (big-endian)   NEW_FLOAT_EXT (minor_version 1); -0.0 keeps
//                                                    its sign bit
//
// Body is the term jiffy 1.1.2 builds (couch_util:json_decode passes dedupe_keys); this file's
// reader reproduces it from the JSON text:
// - Whitespace is ' ', \t, \n, \r. Strings must be valid UTF-8 (no overlong forms, surrogates or
//   code points above U+10FFFF) without raw control characters; escapes are decoded to UTF-8,
//   a \uD800-\uDBFF escape must be followed by a \uDC00-\uDFFF one (the pair is one code point),
//   a lone surrogate escape is an error, \u0000 is a NUL byte.
// - Objects keep their key order; a repeated key keeps its last value at the position of its
//   last occurrence (jiffy's make_object walks the pairs backwards and skips seen keys).
// - Numbers follow JSON's grammar, except that jiffy also takes an empty signed exponent ("1e+").
//   A literal without '.', 'e', 'E' is an exact integer (strtol, or list_to_integer beyond 64
//   bits). Any other is a double: strtod's value when the literal is shorter than 32 characters
//   and strtod does not set ERANGE; otherwise, with a '.', list_to_float (strtod's value, an
//   error on overflow); otherwise Mantissa * math:pow(10, Exp), which converts a bignum mantissa
//   64 bits at a time and rounds twice, so it can differ from strtod (5e-324 becomes 0.0: strtod
//   flags that denormal ERANGE, and pow(10, -324) is 0.0). A non-finite result is an error, and
//   so is an integer Erlang cannot convert to a finite double (CouchDB's couch_ejson_size then
//   fails). Both only count in values that survive deduplication: jiffy converts these
//   literals after make_object has dropped repeated keys.
#include "core/rev/couch_rev.h"

#include <locale.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "core/util/digest.h"
#include "core/util/json_text.h"

namespace chaise::core {
namespace {

// ---------------------------------------------------------------------------------------------
// The EJSON term jiffy builds.

struct Term;
struct Member;  // {key, value}: complete after Term (a std::pair cannot hold an incomplete Term)

struct Term {
  // rejected_number: a literal CouchDB fails on (see number()); harmless unless it is encoded.
  enum class Kind { atom, binary, integer, float_, list, object, rejected_number };
  Kind kind = Kind::atom;
  // atom: its name; binary: its bytes; integer: the magnitude, little-endian, without high zero
  // bytes (empty for 0).
  std::string bytes;
  bool negative = false;  // integer: its sign (never set for 0)
  double number = 0.0;    // float
  std::vector<Term> items;
  std::vector<Member> members;  // object, already deduplicated
};

struct Member {
  std::string first;
  Term second;
};

Term make_term(Term::Kind kind) {
  Term t;
  t.kind = kind;
  return t;
}

Term atom_term(std::string_view name) {
  Term t = make_term(Term::Kind::atom);
  t.bytes = name;
  return t;
}

Term float_term(double d) {
  Term t = make_term(Term::Kind::float_);
  t.number = d;
  return t;
}

// ---------------------------------------------------------------------------------------------
// Numbers, as jiffy's dec_number and finish_decode turn a literal into a term.

// jiffy decodes literals of this many characters or more in Erlang (NUM_BUF_LEN).
constexpr std::size_t kJiffyNumBufLen = 32;

// The decimal digits `digits` as a little-endian magnitude without high zero bytes.
std::string decimal_to_magnitude(std::string_view digits) {
  std::vector<std::uint32_t> limbs;  // little-endian, base 2^32
  std::size_t i = 0;
  while (i < digits.size()) {
    const std::size_t chunk = std::min<std::size_t>(9, digits.size() - i);
    std::uint64_t carry = 0;
    std::uint64_t scale = 1;
    for (std::size_t k = 0; k < chunk; ++k) {
      carry = carry * 10 + static_cast<std::uint64_t>(digits[i + k] - '0');
      scale *= 10;
    }
    i += chunk;
    for (std::uint32_t& limb : limbs) {
      const std::uint64_t v = limb * scale + carry;
      limb = static_cast<std::uint32_t>(v);
      carry = v >> 32;
    }
    if (carry != 0) limbs.push_back(static_cast<std::uint32_t>(carry));
  }
  std::string out;
  for (std::uint32_t limb : limbs) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((limb >> (8 * b)) & 0xff));
  }
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

// Erlang's integer-to-float conversion in mixed arithmetic (big_to_double: one 64-bit digit at a
// time, most significant first; correctly rounded only for a single digit). nullopt when it is
// not finite.
std::optional<double> erlang_integer_to_double(const Term& integer) {
  const std::string& m = integer.bytes;
  double d = 0.0;
  for (std::size_t end = (m.size() + 7) / 8 * 8; end > 0; end -= 8) {
    std::uint64_t digit = 0;
    for (std::size_t b = end; b > end - 8; --b) {
      const std::size_t at = b - 1;
      digit = (digit << 8) | (at < m.size() ? static_cast<unsigned char>(m[at]) : 0u);
    }
    d = d * 18446744073709551616.0 + static_cast<double>(digit);
    if (!std::isfinite(d)) return std::nullopt;
  }
  return integer.negative ? -d : d;
}

// CouchDB fails on an integer that Erlang cannot convert to a finite double
// (couch_ejson_size:encoded_size calls math:log10 on every integer of a body: badarith, 500), so
// no accepted integer literal has more than 309 digits (JSON has no leading zeros).
constexpr std::size_t kIntegerDigitsMax = 309;

// An integer literal (optional '-', then digits), or nullopt when CouchDB fails on it.
std::optional<Term> integer_term(std::string_view literal) {
  Term t = make_term(Term::Kind::integer);
  const bool minus = !literal.empty() && literal.front() == '-';
  if (minus) literal.remove_prefix(1);
  if (literal.size() > kIntegerDigitsMax) return std::nullopt;
  if (literal.size() <= 18) {  // below 10^18 < 2^63: the magnitude straight from a uint64
    std::uint64_t v = 0;
    for (char c : literal) v = v * 10 + static_cast<std::uint64_t>(c - '0');
    for (; v != 0; v >>= 8) t.bytes.push_back(static_cast<char>(v & 0xff));
    t.negative = minus && !t.bytes.empty();
    return t;
  }
  t.bytes = decimal_to_magnitude(literal);
  t.negative = minus && !t.bytes.empty();
  if (!erlang_integer_to_double(t)) return std::nullopt;
  return t;
}

// strtod in the "C" locale, so that a setlocale() elsewhere in the process cannot change what '.'
// means. Its ERANGE is part of jiffy's rules: glibc sets it on overflow, on underflow to zero and
// for every denormal result.
double c_strtod(const std::string& text, bool* range_error) {
  static const locale_t c_locale = newlocale(LC_NUMERIC_MASK, "C", nullptr);
  if (c_locale == nullptr) {
    std::fputs("chaise: newlocale(\"C\") failed\n", stderr);
    std::abort();
  }
  errno = 0;
  const double d = strtod_l(text.c_str(), nullptr, c_locale);
  *range_error = errno == ERANGE;
  return d;
}

// jiffy's bignum_e: IVal * math:pow(10, EVal) for a literal "<int>e<int>" (no '.').
std::optional<Term> mantissa_times_pow10(std::string_view literal) {
  const std::size_t e = literal.find_first_of("eE");
  std::string_view exp = literal.substr(e + 1);
  const bool exp_minus = !exp.empty() && exp.front() == '-';
  if (!exp.empty() && (exp.front() == '-' || exp.front() == '+')) exp.remove_prefix(1);
  if (exp.empty()) return std::nullopt;  // string:to_integer fails: a badmatch in jiffy
  while (exp.size() > 1 && exp.front() == '0') exp.remove_prefix(1);
  if (exp.size() > kIntegerDigitsMax) return std::nullopt;  // math:pow cannot take it as a float
  // Beyond 10^7, pow(10, exp) is 0 or infinite either way: clamp so strtod sees a short number.
  const double magnitude = exp.size() > 7 ? 1e7 : std::strtod(std::string(exp).c_str(), nullptr);
  const double pow10 = std::pow(10.0, exp_minus ? -magnitude : magnitude);
  if (!std::isfinite(pow10)) return std::nullopt;
  const auto integer = integer_term(literal.substr(0, e));
  if (!integer) return std::nullopt;
  const double mantissa = *erlang_integer_to_double(*integer);
  const double product = mantissa * pow10;
  if (!std::isfinite(product)) return std::nullopt;
  return float_term(product);
}

// A literal with '.', 'e' or 'E'. nullopt where jiffy raises an error.
std::optional<Term> double_term(std::string_view literal, bool has_frac) {
  const std::string text(literal);
  bool range_error = false;
  const double d = c_strtod(text, &range_error);
  if (literal.size() < kJiffyNumBufLen && !range_error) return float_term(d);
  if (has_frac) {  // list_to_float: strtod, but an overflow is an error
    if (!std::isfinite(d)) return std::nullopt;
    return float_term(d);
  }
  return mantissa_times_pow10(literal);
}

// A number literal as jiffy turns it into a term: a double with '.', 'e' or 'E', else an
// integer; nullopt where CouchDB fails on it.
std::optional<Term> literal_term(std::string_view literal) {
  const bool has_frac = literal.find('.') != std::string_view::npos;
  const bool has_exp = literal.find_first_of("eE") != std::string_view::npos;
  return has_frac || has_exp ? double_term(literal, has_frac) : integer_term(literal);
}

// ---------------------------------------------------------------------------------------------
// The JSON reader: jiffy's grammar, building the term jiffy builds.

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class JiffyReader {
 public:
  explicit JiffyReader(std::string_view text) : in_(text) {}

  // The whole text as one JSON object, or nullopt.
  std::optional<Term> read_object_document() {
    Term doc;
    skip_space();
    if (peek() != '{' || !value(doc, 0)) return std::nullopt;
    skip_space();
    if (pos_ != in_.size()) return std::nullopt;
    return doc;
  }

 private:
  char peek() const { return pos_ < in_.size() ? in_[pos_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < in_.size() && is_space(in_[pos_])) ++pos_;
  }
  bool literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool value(Term& out, std::size_t depth) {
    skip_space();
    switch (peek()) {
      case '{':
        return depth < kCouchRevNestingMax && object(out, depth + 1);
      case '[':
        return depth < kCouchRevNestingMax && array(out, depth + 1);
      case '"':
        out.kind = Term::Kind::binary;
        return string(out.bytes);
      case 't':
        out = atom_term("true");
        return literal("true");
      case 'f':
        out = atom_term("false");
        return literal("false");
      case 'n':
        out = atom_term("null");
        return literal("null");
      default:
        return number(out);
    }
  }

  bool object(Term& out, std::size_t depth) {
    ++pos_;  // '{'
    out.kind = Term::Kind::object;
    std::vector<Member> pairs;
    skip_space();
    if (!eat('}')) {
      do {
        Member m;
        skip_space();
        if (peek() != '"' || !string(m.first)) return false;
        skip_space();
        if (!eat(':') || !value(m.second, depth)) return false;
        pairs.push_back(std::move(m));
        skip_space();
      } while (eat(','));
      if (!eat('}')) return false;
    }
    out.members = dedupe_keys(std::move(pairs));
    return true;
  }

  // jiffy's dedupe_keys: the last occurrence of each key survives, in place.
  static constexpr std::size_t kSmallObject = 16;
  static std::vector<Member> dedupe_keys(std::vector<Member> pairs) {
    if (pairs.size() <= kSmallObject) {  // most objects: compare the keys pairwise, no set
      bool repeated = false;
      for (std::size_t i = 1; i < pairs.size() && !repeated; ++i)
        for (std::size_t j = 0; j < i && !repeated; ++j)
          repeated = pairs[i].first == pairs[j].first;
      if (!repeated) return pairs;
    }
    std::vector<bool> keep(pairs.size());
    std::unordered_set<std::string_view> seen;
    for (std::size_t i = pairs.size(); i > 0; --i)
      keep[i - 1] = seen.insert(pairs[i - 1].first).second;
    std::vector<Member> kept;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (keep[i]) kept.push_back(std::move(pairs[i]));
    }
    return kept;
  }

  bool array(Term& out, std::size_t depth) {
    ++pos_;  // '['
    out.kind = Term::Kind::list;
    skip_space();
    if (eat(']')) return true;
    do {
      out.items.emplace_back();
      if (!value(out.items.back(), depth)) return false;
      skip_space();
    } while (eat(','));
    return eat(']');
  }

  bool string(std::string& out) {
    ++pos_;  // '"'
    while (pos_ < in_.size()) {
      // A run of printable ASCII other than '"' and '\\' is copied as it is, in one append.
      std::size_t end = pos_;
      while (end < in_.size()) {
        const auto b = static_cast<unsigned char>(in_[end]);
        if (b < 0x20 || b >= 0x80 || b == '"' || b == '\\') break;
        ++end;
      }
      out.append(in_.data() + pos_, end - pos_);
      pos_ = end;
      if (pos_ == in_.size()) break;
      const auto c = static_cast<unsigned char>(in_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (!decode_json_escape(in_, pos_, out)) return false;
      } else if (c < 0x80) {
        out.push_back(static_cast<char>(c));
        ++pos_;
      } else {
        const std::size_t len = utf8_sequence_length(in_.substr(pos_));
        if (len == 0) return false;
        out.append(in_.substr(pos_, len));
        pos_ += len;
      }
    }
    return false;
  }

  // jiffy's dec_number state machine, then its conversion of the literal. A literal CouchDB
  // fails on becomes a rejected_number rather than an error, because CouchDB only fails when the
  // value survives dedupe_keys: jiffy converts out-of-range numbers after deduplicating (in
  // finish_decode), and couch_ejson_size sees the deduplicated body.
  bool number(Term& out) {
    const std::size_t start = pos_;
    eat('-');
    if (!eat('0')) {  // a leading 0 stands alone: "01" is "0" followed by an error
      if (!is_digit(peek())) return false;
      while (is_digit(peek())) ++pos_;
    }
    if (eat('.')) {
      if (!is_digit(peek())) return false;
      while (is_digit(peek())) ++pos_;
    }
    if (eat('e') || eat('E')) {
      const bool sign = eat('+') || eat('-');
      if (!sign && !is_digit(peek())) return false;  // "1e+" alone is accepted, as in jiffy
      while (is_digit(peek())) ++pos_;
    }
    auto d = literal_term(in_.substr(start, pos_ - start));
    out = d ? std::move(*d) : make_term(Term::Kind::rejected_number);
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The ETF writer (the grammar at the top of this file).

enum Tag : unsigned char {
  kVersion = 131,
  kNewFloatExt = 70,
  kSmallIntegerExt = 97,
  kIntegerExt = 98,
  kAtomExt = 100,
  kSmallTupleExt = 104,
  kNilExt = 106,
  kStringExt = 107,
  kListExt = 108,
  kBinaryExt = 109,
  kSmallBigExt = 110,
};

class EtfWriter {
 public:
  void byte(unsigned v) { out_.push_back(static_cast<char>(v & 0xff)); }
  void u16(std::uint32_t v) { be(v, 2); }
  void u32(std::uint64_t v) { be(v, 4); }

  void atom(std::string_view name) {
    byte(kAtomExt);
    u16(static_cast<std::uint32_t>(name.size()));
    out_.append(name);
  }
  void binary(std::string_view b) {
    byte(kBinaryExt);
    u32(b.size());
    out_.append(b);
  }
  void tuple_header(unsigned arity) {
    byte(kSmallTupleExt);
    byte(arity);
  }
  void list_header(std::size_t n) {
    byte(kListExt);
    u32(n);
  }
  void nil() { byte(kNilExt); }
  void small_integer(std::uint8_t v) {
    byte(kSmallIntegerExt);
    byte(v);
  }
  void integer(std::int64_t v) {
    magnitude(v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v), v < 0);
  }
  // The integer of that magnitude and sign (negative is ignored for 0).
  void magnitude(std::uint64_t m, bool negative) {
    Term t = make_term(Term::Kind::integer);
    for (; m != 0; m >>= 8) t.bytes.push_back(static_cast<char>(m & 0xff));
    t.negative = negative && !t.bytes.empty();
    term(t);
  }

  void term(const Term& t) {
    switch (t.kind) {
      case Term::Kind::atom:
        return atom(t.bytes);
      case Term::Kind::binary:
        return binary(t.bytes);
      case Term::Kind::integer:
        return write_integer(t);
      case Term::Kind::float_:
        return write_float(t.number);
      case Term::Kind::list:
        return write_list(t.items);
      case Term::Kind::object:
        return write_object(t.members);
      case Term::Kind::rejected_number:
        rejected_ = true;
        return;
    }
  }

  // True once a rejected_number was written: CouchDB refuses the document.
  bool rejected() const { return rejected_; }
  std::string& bytes() { return out_; }

 private:
  void be(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) byte(static_cast<unsigned>(v >> (8 * i)));
  }

  void write_integer(const Term& t) {
    const std::string& m = t.bytes;
    if (m.size() <= 4) {
      std::int64_t v = 0;
      for (std::size_t i = m.size(); i > 0; --i)
        v = (v << 8) | static_cast<unsigned char>(m[i - 1]);
      if (t.negative) v = -v;
      if (v >= 0 && v <= 255) return small_integer(static_cast<std::uint8_t>(v));
      if (v >= INT32_MIN && v <= INT32_MAX) {
        byte(kIntegerExt);
        return u32(static_cast<std::uint32_t>(v));
      }
    }
    // integer_term() keeps integers below 2^1024, so LARGE_BIG_EXT (over 255 bytes) never occurs.
    assert(m.size() <= 255);
    byte(kSmallBigExt);
    byte(static_cast<unsigned>(m.size()));
    byte(t.negative ? 1 : 0);
    out_.append(m);
  }

  void write_float(double d) {
    std::uint64_t bits = 0;
    static_assert(sizeof bits == sizeof d);
    std::memcpy(&bits, &d, sizeof d);
    byte(kNewFloatExt);
    be(bits, 8);
  }

  // term_to_binary writes a list of integers 0..255 as STRING_EXT when it fits a u16 length.
  static bool is_byte_string(const std::vector<Term>& items) {
    return items.size() <= 0xffff && std::all_of(items.begin(), items.end(), [](const Term& t) {
             return t.kind == Term::Kind::integer && !t.negative && t.bytes.size() <= 1;
           });
  }

  void write_list(const std::vector<Term>& items) {
    if (items.empty()) return nil();
    if (is_byte_string(items)) {
      byte(kStringExt);
      u16(static_cast<std::uint32_t>(items.size()));
      for (const Term& t : items)
        byte(t.bytes.empty() ? 0 : static_cast<unsigned char>(t.bytes[0]));
      return;
    }
    list_header(items.size());
    for (const Term& t : items) term(t);
    nil();
  }

  void write_object(const std::vector<Member>& members) {
    tuple_header(1);
    if (members.empty()) return nil();
    list_header(members.size());
    for (const auto& [key, value] : members) {
      tuple_header(2);
      binary(key);
      term(value);
    }
    nil();
  }

  std::string out_;
  bool rejected_ = false;
};

// The term a Json value has once dump_json writes it and JiffyReader reads it back, written into
// `w` directly. False when there is none (rejected_number, a binary value that is not number
// text, nesting beyond kCouchRevNestingMax).
bool write_json_term(EtfWriter& w, const nlohmann::ordered_json& j, std::size_t depth);

bool write_number_literal(EtfWriter& w, std::string_view literal) {
  const std::optional<Term> t = literal_term(literal);
  if (!t) return false;
  w.term(*t);
  return true;
}

bool write_json_term(EtfWriter& w, const nlohmann::ordered_json& j, std::size_t depth) {
  using V = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case V::null:
      w.atom("null");
      return true;
    case V::boolean:
      w.atom(j.get<bool>() ? "true" : "false");
      return true;
    case V::string:
      w.binary(j.get_ref<const std::string&>());
      return true;
    case V::number_integer: {
      const auto v = j.get<std::int64_t>();
      w.magnitude(v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v), v < 0);
      return true;
    }
    case V::number_unsigned:
      w.magnitude(j.get<std::uint64_t>(), false);
      return true;
    case V::number_float: {
      const std::string text = dump_json(j);  // what the body text holds: "null" if not finite
      if (text == "null") {
        w.atom("null");
        return true;
      }
      return write_number_literal(w, text);
    }
    case V::binary:
      return is_number_text(j) && write_number_literal(w, number_text(j));
    case V::array: {
      if (depth >= kCouchRevNestingMax) return false;
      if (j.empty()) {
        w.nil();
        return true;
      }
      const bool byte_string =
          j.size() <= 0xffff && std::all_of(j.begin(), j.end(), [](const auto& item) {
            return (item.is_number_unsigned() && item.template get<std::uint64_t>() <= 255) ||
                   (item.is_number_integer() && item.template get<std::int64_t>() >= 0 &&
                    item.template get<std::int64_t>() <= 255);
          });
      if (byte_string) {
        w.byte(kStringExt);
        w.u16(static_cast<std::uint32_t>(j.size()));
        for (const auto& item : j)
          w.byte(static_cast<unsigned>(item.template get<std::uint64_t>()));
        return true;
      }
      w.list_header(j.size());
      for (const auto& item : j) {
        if (!write_json_term(w, item, depth + 1)) return false;
      }
      w.nil();
      return true;
    }
    case V::object: {
      if (depth >= kCouchRevNestingMax) return false;
      w.tuple_header(1);
      if (j.empty()) {
        w.nil();
        return true;
      }
      w.list_header(j.size());
      for (const auto& [key, value] : j.items()) {
        w.tuple_header(2);
        w.binary(key);
        if (!write_json_term(w, value, depth + 1)) return false;
      }
      w.nil();
      return true;
    }
    case V::discarded:
      return false;
  }
  return false;
}

// term_to_binary([Deleted, OldStart, OldRev, Body, Atts2], [{minor_version, 1}]) around the
// body's term, hashed.
template <typename WriteBody>
std::string hash_around(bool deleted, const std::optional<RevId>& parent, const WriteBody& body,
                        const std::vector<CouchAttSig>& atts, std::size_t size_hint) {
  // CouchDB only hashes when every attachment has an MD5 (otherwise its rev is random).
  for (const CouchAttSig& a : atts) {
    if (a.md5.empty()) return {};
  }
  EtfWriter w;
  w.bytes().reserve(size_hint + 64);
  w.byte(kVersion);
  w.list_header(5);
  w.atom(deleted ? "true" : "false");
  if (parent) {
    w.integer(parent->pos);
    w.binary(parent->hash);
  } else {
    w.small_integer(0);
    w.small_integer(0);
  }
  body(w);
  if (atts.empty()) {
    w.nil();
  } else {
    w.list_header(atts.size());  // Atts2 is built by a foldl: last attachment first
    for (auto it = atts.rbegin(); it != atts.rend(); ++it) {
      w.tuple_header(3);
      w.binary(it->name);
      w.binary(it->content_type);
      w.binary(it->md5);
    }
    w.nil();
  }
  w.nil();
  if (w.rejected()) return {};
  return md5(w.bytes());
}

}  // namespace

std::string couch_rev_hash(bool deleted, const std::optional<RevId>& parent,
                           std::string_view body_json, const std::vector<CouchAttSig>& atts) {
  std::optional<Term> body = JiffyReader(body_json).read_object_document();
  if (!body) return {};
  // ETF spends a few more bytes per value than JSON.
  return hash_around(
      deleted, parent, [&](EtfWriter& w) { w.term(*body); }, atts, 2 * body_json.size());
}

void CouchBodyTerm::member(std::string_view key, const nlohmann::ordered_json& value) {
  if (failed_) return;
  EtfWriter w;
  w.bytes().swap(members_);
  w.tuple_header(2);
  w.binary(key);
  // The body object is at depth 1 of JiffyReader's count, its members' values at 1 too.
  failed_ = !write_json_term(w, value, 1);
  w.bytes().swap(members_);
  ++count_;
}

std::string CouchBodyTerm::finish() const {
  if (failed_) return {};
  EtfWriter w;
  w.bytes().reserve(members_.size() + 8);
  w.tuple_header(1);
  if (count_ == 0) {
    w.nil();
    return std::move(w.bytes());
  }
  w.list_header(count_);
  w.bytes().append(members_);
  w.nil();
  return std::move(w.bytes());
}

std::string couch_rev_hash_of_term(bool deleted, const std::optional<RevId>& parent,
                                   std::string_view body_term,
                                   const std::vector<CouchAttSig>& atts) {
  if (body_term.empty()) return {};
  return hash_around(
      deleted, parent, [&](EtfWriter& w) { w.bytes().append(body_term); }, atts, body_term.size());
}

std::string mango_index_gen_name(std::string_view body_json, const MangoIndexNaming& o) {
  const std::optional<Term> body = JiffyReader(body_json).read_object_document();
  if (!body) return {};
  const Term* def = nullptr;
  for (const Member& m : body->members)
    if (m.first == "index") def = &m.second;
  if (def == nullptr || def->kind != Term::Kind::object) return {};
  EtfWriter w;
  w.byte(kVersion);
  w.tuple_header(2);
  w.term(*def);
  // lists:usort of the options: sorted by their atom names.
  w.list_header(6 + (o.sync_index ? 1 : 0) + (o.unique ? 1 : 0));
  const auto text_or_auto = [&w](const std::optional<std::string>& v) {
    if (v)
      w.binary(*v);
    else
      w.atom("auto_name");
  };
  w.tuple_header(2);
  w.atom("ddoc");
  text_or_auto(o.ddoc);
  w.tuple_header(2);
  w.atom("def");
  w.term(*def);
  w.tuple_header(2);
  w.atom("name");
  text_or_auto(o.name);
  w.tuple_header(2);
  w.atom("partitioned");
  w.atom(!o.partitioned ? "db_default" : *o.partitioned ? "true" : "false");
  if (o.sync_index) {
    w.tuple_header(2);
    w.atom("sync_index");
    w.atom("true");
  }
  w.tuple_header(2);
  w.atom("type");
  w.binary(o.type);
  if (o.unique) {
    w.tuple_header(2);
    w.atom("unique");
    w.atom("true");
  }
  w.tuple_header(2);
  w.atom("w");
  w.integer(o.w);
  w.nil();
  if (w.rejected()) return {};
  return hex(sha1(w.bytes()));
}

namespace {

// An Erlang string: STRING_EXT for up to 65,535 bytes, NIL_EXT when empty.
void write_charlist(EtfWriter& w, std::string_view s) {
  if (s.empty()) return w.nil();
  if (s.size() <= 0xffff) {
    w.byte(kStringExt);
    w.u16(static_cast<std::uint32_t>(s.size()));
    w.bytes().append(s);
    return;
  }
  w.list_header(s.size());
  for (unsigned char c : s) w.small_integer(c);
  w.nil();
}

void write_rep_endpoint(EtfWriter& w, const ReplicationIdEndpoint& e) {
  w.tuple_header(7);
  w.atom("remote");
  if (e.user)
    write_charlist(w, *e.user);
  else
    w.atom("undefined");
  write_charlist(w, e.host);
  if (e.port)
    w.integer(*e.port);
  else
    w.atom("default");
  write_charlist(w, e.path);
  if (e.headers.empty()) {
    w.nil();
  } else {
    w.list_header(e.headers.size());
    for (const auto& [name, value] : e.headers) {
      w.tuple_header(2);
      write_charlist(w, name);
      write_charlist(w, value);
    }
    w.nil();
  }
  w.atom("undefined");
}

}  // namespace

std::string replication_id_hash(std::string_view server_uuid, const ReplicationIdEndpoint& source,
                                const ReplicationIdEndpoint& target,
                                const std::vector<nlohmann::ordered_json>& filter,
                                bool winning_revs_only) {
  EtfWriter w;
  w.byte(kVersion);
  w.list_header(3 + filter.size() + (winning_revs_only ? 1 : 0));
  w.binary(server_uuid);
  write_rep_endpoint(w, source);
  write_rep_endpoint(w, target);
  for (const auto& f : filter)
    if (!write_json_term(w, f, 0)) return {};
  if (winning_revs_only) w.binary("winning_revs_only");
  w.nil();
  if (w.rejected()) return {};
  return hex(md5(w.bytes()));
}

}  // namespace chaise::core
