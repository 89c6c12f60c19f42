// core/query/selector.cc — Mango selectors: CouchDB's three normalization passes (norm_ops, norm_fields,
// norm_negations of mango_selector.erl), the matcher and the JSON collation it compares with
// ($regex is core/mango_regex).
//
// Normalized form (what Node trees look like after parse(); mango_selector.erl's grammar):
//   selector  := combinator | field
//   combinator:= $and [selector...] | $or [selector...] | $not selector | $nor [selector...]
//   field     := path -> condition              (path: field names, [] = the value itself)
//   condition := terminal | $not terminal | $elemMatch selector | $allMatch selector
//              | $keyMapMatch selector
//   terminal  := $eq $ne $lt $lte $gt $gte $in $nin $all $exists $type $mod $size $regex
//                $beginsWith (each with its JSON argument) | $default (from $text)
// norm_negations only walks the combinators above the fields, so sub-selectors of $elemMatch,
// $allMatch and $keyMapMatch keep whatever $not/$nor they were written with; the matcher handles
// $not anywhere and treats a left-over $nor as CouchDB does (see Truth::kFault).
#include "core/query/selector.h"

#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/query/mango_regex.h"

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;
using Path = std::vector<std::string>;
// JSON integers are int64 or uint64 (nlohmann); 128 bits hold either, and their differences and
// remainders, without overflow.
using Int128 = __int128;

// ---- Erlang's ~w, for CouchDB's error reasons -------------------------------------------------
// mango_error prints a bad argument with io_lib:format("~w", [Arg]), Arg being the JSON as jiffy
// decodes it: null/true/false are atoms, numbers numbers, strings binaries (~w prints their
// bytes: "ab" -> <<97,98>>), arrays lists, objects {[{Key,Value},...]}.

// io_lib_format:fwrite_g/1: the shortest digits that read back as `d`, in plain notation
// ("100.0", "0.001") or scientific ("1.0e3", "1.5e-7"), whichever is shorter; scientific always
// from 2^53 up.
void append_erlang_float(std::string& out, double d) {
  if (!std::isfinite(d)) {  // not JSON: only possible in a value built in code
    out += "undefined";
    return;
  }
  if (d == 0) {
    out += std::signbit(d) ? "-0.0" : "0.0";
    return;
  }
  std::array<char, 64> buf{};
  auto [end, ec] =
      std::to_chars(buf.data(), buf.data() + buf.size(), d, std::chars_format::scientific);
  assert(ec == std::errc());
  std::string_view text(buf.data(), static_cast<std::size_t>(end - buf.data()));  // -D.DDDe+XX
  if (text.front() == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  const std::size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string_view exp_text = text.substr(e + 1);
  if (exp_text.front() == '+') exp_text.remove_prefix(1);
  int exp = 0;
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp);

  const int len = static_cast<int>(digits.size());
  const int place = exp - (len - 1);  // the value is digits * 10^place
  const std::string exp_str = std::to_string(exp);
  const int exp_cost = static_cast<int>(exp_str.size()) + 2;
  auto scientific = [&] {
    out.push_back(digits[0]);
    out += len == 1 ? ".0" : "." + digits.substr(1);
    out += "e" + exp_str;
  };
  if (place < 0) {
    if (exp >= 0) {
      const auto int_digits = static_cast<std::size_t>(len + place);
      out += digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    } else if (2 - place - len <= exp_cost) {
      out += "0." + std::string(static_cast<std::size_t>(-place - len), '0') + digits;
    } else {
      scientific();
    }
  } else {
    const int dot = len == 1 ? 1 : 0;
    if (exp_cost + dot >= place + 2 && std::fabs(d) < 9007199254740992.0) {
      out += digits + std::string(static_cast<std::size_t>(place), '0') + ".0";
    } else {
      scientific();
    }
  }
}

// ~p prints a binary of printable Latin-1 bytes as text: <<"asc">>.
bool printable_latin1(const std::string& s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool printable = (c >= 32 && c <= 126) || c >= 160 || c == '\n' || c == '\r' ||
                           c == '\t' || c == '\v' || c == '\b' || c == '\f' || c == 27;
    if (!printable) return false;
  }
  return true;
}

void append_erlang_binary(std::string& out, const std::string& s, bool pretty) {
  if (pretty && !s.empty() && printable_latin1(s)) {
    out += "<<\"";
    for (const char c : s) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\v':
          out += "\\v";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case 27:
          out += "\\e";
          break;
        default:
          out.push_back(c);
      }
    }
    out += "\">>";
    return;
  }
  out += "<<";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += std::to_string(static_cast<unsigned char>(s[i]));
  }
  out += ">>";
}

// Recursion is bounded by the nesting of `j`, a part of a selector (kSelectorDepthMax). `pretty`:
// as ~p prints it (printable binaries as text, never wrapped), else as ~w.
void append_erlang_term(std::string& out, const Json& j, bool pretty = false) {
  switch (j.type()) {
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(j.get<std::int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(j.get<std::uint64_t>());
      return;
    case Json::value_t::number_float:
      append_erlang_float(out, j.get<double>());
      return;
    case Json::value_t::string:
      append_erlang_binary(out, j.get_ref<const std::string&>(), pretty);
      return;
    case Json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const Json& e : j) {
        if (!first) out.push_back(',');
        first = false;
        append_erlang_term(out, e, pretty);
      }
      out.push_back(']');
      return;
    }
    case Json::value_t::object: {
      out += "{[";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out.push_back(',');
        first = false;
        out.push_back('{');
        append_erlang_binary(out, it.key(), pretty);
        out.push_back(',');
        append_erlang_term(out, it.value(), pretty);
        out.push_back('}');
      }
      out += "]}";
      return;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      out += "undefined";  // not JSON: never in a parsed selector
      return;
  }
}

// ---- CouchDB's errors (mango_error:info/2; _changes answers them all 400 bad_request) ----

CouchError bad_arg(std::string_view op, const Json& arg, std::string_view detail = {}) {
  std::string reason = "Bad argument for operator ";
  reason += op;
  reason += ": ";
  append_erlang_term(reason, arg);
  reason += detail;
  return err::bad_arg(std::move(reason));
}

CouchError invalid_operator(std::string_view op) {
  return err::invalid_operator("Invalid operator: " + std::string(op));
}

CouchError not_supported(std::string_view op) {
  return err::not_supported("Unsupported operator: " + std::string(op));
}

CouchError bad_field(const Json& selector) {
  std::string reason = "Invalid field normalization on selector: ";
  append_erlang_term(reason, selector);
  return err::bad_field(std::move(reason));
}

CouchError invalid_field_name(std::string_view field) {
  return err::invalid_field_name("Invalid field name: " + std::string(field));
}

// ---- Collation --------------------------------------------------------------------------------
// mango_json:cmp/2 is couch_ejson_compare:less/2, the view collation:
//   null < false < true < numbers < strings < arrays < objects
// numbers by value (1 == 1.0), strings with ICU (here: by UTF-8 bytes, i.e. code points), arrays
// element by element then shorter first, objects member by member (key, then value) in their
// order, then fewer members first.
// mango_json:cmp_raw/2, used for the field "_id", is Erlang's term order on the decoded JSON:
//   numbers < false < null < true (atoms, alphabetical) < objects (tuples) < arrays (lists)
//   < strings (binaries)
// with the same rules inside arrays and objects.

enum class Collation : std::uint8_t { kCouch, kErlangTerm };

int type_rank(const Json& j, Collation c) {
  const bool couch = c == Collation::kCouch;
  switch (j.type()) {
    case Json::value_t::null:
      return couch ? 0 : 2;
    case Json::value_t::boolean:
      return j.get<bool>() ? (couch ? 2 : 3) : 1;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return couch ? 3 : 0;
    case Json::value_t::string:
      return couch ? 4 : 6;
    case Json::value_t::array:
      return 5;
    case Json::value_t::object:
      return couch ? 6 : 4;
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return -1;  // not JSON: below everything
}

template <typename T>
int three_way(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

std::optional<Int128> integer_of(const Json& j) {
  if (j.is_number_unsigned()) return static_cast<Int128>(j.get<std::uint64_t>());
  if (j.is_number_integer()) return static_cast<Int128>(j.get<std::int64_t>());
  return std::nullopt;
}

// Exact comparison of an integer with a double (Erlang compares them exactly too).
int compare_int_double(Int128 i, double d) {
  constexpr double kBeyondAnyInt = 1.9e19;  // |JSON integers| < 2^64 ~ 1.8447e19
  if (std::isnan(d)) return 0;              // not JSON
  if (d < -kBeyondAnyInt) return 1;
  if (d > kBeyondAnyInt) return -1;
  const double floor_d = std::floor(d);
  const auto floor_i = static_cast<Int128>(floor_d);
  if (i != floor_i) return three_way(i, floor_i);
  return d > floor_d ? -1 : 0;
}

int compare_numbers(const Json& a, const Json& b) {
  const auto ia = integer_of(a);
  const auto ib = integer_of(b);
  if (ia && ib) return three_way(*ia, *ib);
  if (ia) return compare_int_double(*ia, b.get<double>());
  if (ib) return -compare_int_double(*ib, a.get<double>());
  return three_way(a.get<double>(), b.get<double>());
}

int compare_strings(const std::string& a, const std::string& b) {
  const int r = a.compare(b);  // char_traits<char> compares as unsigned char: UTF-8 byte order
  return r < 0 ? -1 : (r > 0 ? 1 : 0);
}

// Recursion descends `a` and `b` together, so it is bounded by the shallower one; one of them is
// always a selector argument (kSelectorDepthMax).
int compare(const Json& a, const Json& b, Collation c) {
  const int ra = type_rank(a, c);
  const int rb = type_rank(b, c);
  if (ra != rb) return three_way(ra, rb);
  if (a.is_number()) return compare_numbers(a, b);
  if (a.is_string()) {
    return compare_strings(a.get_ref<const std::string&>(), b.get_ref<const std::string&>());
  }
  if (a.is_array()) {
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (const int r = compare(a[i], b[i], c); r != 0) return r;
    }
    return three_way(a.size(), b.size());
  }
  if (a.is_object()) {
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end() && ib != b.end(); ++ia, ++ib) {
      if (const int r = compare_strings(ia.key(), ib.key()); r != 0) return r;
      if (const int r = compare(ia.value(), ib.value(), c); r != 0) return r;
    }
    return three_way(a.size(), b.size());
  }
  return 0;  // null, or two booleans of one rank
}

// Erlang's term equality as $all uses it: =:= (lists:member/2; 1 and 1.0 differ) or ==
// (`A == Values`; 1 and 1.0 are equal). Objects are equal with the same members in the same
// order. Bounded like compare().
enum class NumberEquality : std::uint8_t { kExact, kArithmetic };

bool term_equal(const Json& a, const Json& b, NumberEquality eq) {
  if (a.is_number() && b.is_number()) {
    if (eq == NumberEquality::kExact && a.is_number_float() != b.is_number_float()) return false;
    return compare_numbers(a, b) == 0;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::null:
      return true;
    case Json::value_t::boolean:
      return a.get<bool>() == b.get<bool>();
    case Json::value_t::string:
      return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!term_equal(a[i], b[i], eq)) return false;
      }
      return true;
    }
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !term_equal(ia.value(), ib.value(), eq)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

// mango_json:type/1.
std::string_view type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "";
  }
}

// ---- Field paths ------------------------------------------------------------------------------

// mango_util:parse_field/1: splits on every dot not preceded by a backslash, then drops the
// backslashes from each part. A part empty before that (a leading, trailing or doubled dot, or
// the empty name) is an error.
std::optional<Path> parse_field(std::string_view field) {
  Path path;
  std::string part;
  std::size_t part_bytes = 0;  // bytes of the part as written, backslashes included
  for (std::size_t i = 0; i <= field.size(); ++i) {
    if (i == field.size() || (field[i] == '.' && (i == 0 || field[i - 1] != '\\'))) {
      if (part_bytes == 0) return std::nullopt;
      path.push_back(std::move(part));
      part.clear();
      part_bytes = 0;
      continue;
    }
    ++part_bytes;
    if (field[i] != '\\') part.push_back(field[i]);
  }
  return path;
}

// An array index as Erlang's binary_to_integer/1 reads one: optional sign, decimal digits.
std::optional<std::size_t> parse_array_index(const std::string& name, std::size_t size) {
  std::string_view s = name;
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  std::size_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (value < size) value = value * 10 + static_cast<std::size_t>(c - '0');  // else: too big
  }
  if (negative && value != 0) return std::nullopt;
  if (value >= size) return std::nullopt;
  return value;
}

// mango_doc:get_field/2.
enum class Lookup : std::uint8_t { kFound, kNotFound, kBadPath };

Lookup get_field(const Json& doc, const Path& path, const Json** found) {
  const Json* v = &doc;
  for (const std::string& name : path) {
    if (v->is_object()) {
      auto it = v->find(name);
      if (it == v->end()) return Lookup::kNotFound;
      v = &*it;
    } else if (v->is_array()) {
      auto index = parse_array_index(name, v->size());
      if (!index) return Lookup::kBadPath;
      v = &(*v)[*index];
    } else {
      return Lookup::kBadPath;
    }
  }
  *found = v;
  return Lookup::kFound;
}

// couch_util:validate_utf8/1 (strict RFC 3629: no overlongs, surrogates or > U+10FFFF).
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace

// ---- The normalized selector tree -------------------------------------------------------------

namespace selector_detail {

enum class Op : std::uint8_t {
  // Combinators: `children` are selectors.
  kAnd,
  kOr,
  kNor,
  kNot,  // one child
  // A field: `path` (after norm_fields; `field`, the name as written, before) and one child,
  // its condition.
  kField,
  // Terminals: `arg` is the operator's JSON argument.
  kEq,
  kNe,
  kLt,
  kLte,
  kGt,
  kGte,
  kIn,
  kNin,
  kAll,
  kExists,
  kType,
  kMod,
  kSize,
  kRegex,  // also `regex`
  kBeginsWith,
  kDefault,  // $text's internal form; `arg` is the whole {"$default": ...} selector
  // Sub-selectors applied to elements / keys: one child.
  kElemMatch,
  kAllMatch,
  kKeyMapMatch,
};

struct Node {
  Op op = Op::kAnd;
  // kField: the name as written before norm_fields; after it, the names on the way down joined
  // with '.' as written (mango's normalized form names the field so).
  std::string field;
  Path path;
  std::vector<Node> children;
  Json arg;
  std::shared_ptr<const mango_regex::Regex> regex;
};

}  // namespace selector_detail

namespace {

using selector_detail::Node;
using selector_detail::Op;

Node terminal(Op op, const Json& arg) {
  Node n;
  n.op = op;
  n.arg = arg;
  return n;
}

Node with_children(Op op, std::vector<Node> children) {
  Node n;
  n.op = op;
  n.children = std::move(children);
  return n;
}

Node field_node(Path path, std::string text, Node condition) {
  Node n;
  n.op = Op::kField;
  n.field = std::move(text);
  n.path = std::move(path);
  n.children.push_back(std::move(condition));
  return n;
}

bool is_terminal(Op op) { return op >= Op::kEq && op <= Op::kDefault; }

// True if `j` nests more than `levels_max` levels of arrays and objects. Recursion stops one
// level past the limit.
bool deeper_than(const Json& j, int levels_max) {
  if (!j.is_structured()) return false;
  if (levels_max == 0) return true;
  for (const Json& e : j) {
    if (deeper_than(e, levels_max - 1)) return true;
  }
  return false;
}

struct OpName {
  std::string_view name;
  Op op;
};
constexpr std::array<OpName, 6> kComparisons = {{{"$lt", Op::kLt},
                                                 {"$lte", Op::kLte},
                                                 {"$eq", Op::kEq},
                                                 {"$ne", Op::kNe},
                                                 {"$gte", Op::kGte},
                                                 {"$gt", Op::kGt}}};
constexpr std::array<std::string_view, 5> kUnsupportedOps = {
    "$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere"};

// The three passes of mango_selector:normalize/1. Each returns the rewritten tree; the first
// error (in CouchDB's evaluation order) is kept in `error` and stops further work.
class Normalizer {
 public:
  std::optional<CouchError> error;

  // norm_ops: validates operators and their arguments; makes implicit $and and $eq explicit.
  Node norm_ops(const Json& selector) {
    if (selector.is_object() && selector.size() == 1) {
      return norm_member(selector.begin().key(), selector.begin().value());
    }
    if (selector.is_object() && selector.size() > 1) {
      Node n = with_children(Op::kAnd, {});
      for (auto it = selector.begin(); it != selector.end() && !error; ++it) {
        n.children.push_back(norm_member(it.key(), it.value()));
      }
      return n;
    }
    return terminal(Op::kEq, selector);  // a bare value, {} included
  }

  // norm_fields: pushes field names down through $and/$or/$not/$nor onto the conditions,
  // joining nested names into one path (`text`: the names as written, joined with '.').
  Node norm_fields(Node n, const Path& path, const std::string& text = {}) {
    if (error) return n;
    switch (n.op) {
      case Op::kAnd:
      case Op::kOr:
      case Op::kNor:
      case Op::kNot:
        for (Node& c : n.children) c = norm_fields(std::move(c), path, text);
        return n;
      case Op::kElemMatch:
      case Op::kAllMatch:
      case Op::kKeyMapMatch:
        n.children.front() = norm_fields(std::move(n.children.front()), {});
        return field_node(path, text, std::move(n));
      case Op::kDefault:
        if (path.empty() && is_text_default(n.arg)) return n;
        return fail(bad_field(n.arg));
      case Op::kField: {
        auto names = parse_field(n.field);
        if (!names) return fail(invalid_field_name(n.field));
        Path longer = path;
        longer.insert(longer.end(), names->begin(), names->end());
        return norm_fields(std::move(n.children.front()), longer,
                           text.empty() ? n.field : text + "." + n.field);
      }
      default:
        assert(is_terminal(n.op));
        return field_node(path, text, std::move(n));
    }
  }

  // norm_negations: removes $not and $nor from the combinators above the fields (De Morgan),
  // negating the conditions they reach.
  Node norm_negations(Node n) {
    if (error) return n;
    switch (n.op) {
      case Op::kNot:
        return negate(std::move(n.children.front()));
      case Op::kNor:
        for (Node& c : n.children) c = negate(std::move(c));
        n.op = Op::kAnd;
        return n;
      case Op::kAnd:
      case Op::kOr:
      case Op::kElemMatch:
      case Op::kAllMatch:
      case Op::kKeyMapMatch:
        for (Node& c : n.children) c = norm_negations(std::move(c));
        return n;
      default:
        return n;
    }
  }

 private:
  Node fail(CouchError e) {
    if (!error) error = std::move(e);
    return Node{};
  }

  static bool is_text_default(const Json& selector) {
    const Json& value = selector.begin().value();
    return value.is_object() && value.size() == 1 && value.begin().key() == "$text";
  }

  static bool is_integer(const Json& j) { return j.is_number_integer(); }

  static Json one_member(std::string_view key, const Json& value) {
    Json obj = Json::object();
    obj[std::string(key)] = value;
    return obj;
  }

  Node norm_list(Op op, const Json& args) {
    Node n = with_children(op, {});
    for (const Json& a : args) {
      if (error) break;
      n.children.push_back(norm_ops(a));
    }
    return n;
  }

  Node norm_member(const std::string& key, const Json& value) {
    if (key.empty() || key.front() != '$') {
      Node n;
      n.op = Op::kField;
      n.field = key;
      n.children.push_back(norm_ops(value));
      return n;
    }
    if (key == "$and" || key == "$or" || key == "$nor") {
      if (!value.is_array()) return fail(bad_arg(key, value));
      return norm_list(key == "$and" ? Op::kAnd : (key == "$or" ? Op::kOr : Op::kNor), value);
    }
    if (key == "$not" || key == "$elemMatch" || key == "$allMatch" || key == "$keyMapMatch") {
      if (!value.is_object()) return fail(bad_arg(key, value));
      const Op op = key == "$not"         ? Op::kNot
                    : key == "$elemMatch" ? Op::kElemMatch
                    : key == "$allMatch"  ? Op::kAllMatch
                                          : Op::kKeyMapMatch;
      std::vector<Node> child;
      child.push_back(norm_ops(value));
      return with_children(op, std::move(child));
    }
    if (key == "$in" || key == "$nin" || key == "$all") {
      if (!value.is_array()) return fail(bad_arg(key, value));
      return terminal(key == "$in" ? Op::kIn : (key == "$nin" ? Op::kNin : Op::kAll), value);
    }
    if (key == "$exists") {
      if (!value.is_boolean()) return fail(bad_arg(key, value));
      return terminal(Op::kExists, value);
    }
    if (key == "$type") {
      if (!value.is_string()) return fail(bad_arg(key, value));
      return terminal(Op::kType, value);
    }
    if (key == "$mod") {
      // CouchDB accepts a zero divisor and then fails while matching; the docs require a
      // non-zero one, so Chaise refuses it here.
      if (!value.is_array() || value.size() != 2 || !is_integer(value[0]) ||
          !is_integer(value[1]) || value[0].get<std::int64_t>() == 0) {
        return fail(bad_arg(key, value));
      }
      return terminal(Op::kMod, value);
    }
    if (key == "$regex" && value.is_string()) return norm_regex(value);
    if (key == "$size") {
      if (!is_integer(value) || (!value.is_number_unsigned() && value.get<std::int64_t>() < 0)) {
        return fail(bad_arg(key, value));
      }
      return terminal(Op::kSize, value);
    }
    if (key == "$text") {
      if (!value.is_string() && !value.is_number() && !value.is_boolean()) {
        return fail(bad_arg(key, value));
      }
      return terminal(Op::kDefault, one_member("$default", one_member("$text", value)));
    }
    if (key == "$beginsWith" && value.is_string()) {
      if (!is_valid_utf8(value.get_ref<const std::string&>())) return fail(bad_arg(key, value));
      return terminal(Op::kBeginsWith, value);
    }
    if (key == "$default") return terminal(Op::kDefault, one_member(key, value));
    for (const OpName& c : kComparisons) {
      if (key == c.name) return terminal(c.op, value);
    }
    for (std::string_view op : kUnsupportedOps) {
      if (key == op) return fail(not_supported(key));
    }
    return fail(invalid_operator(key));  // $regex and $beginsWith with a non-string land here
  }

  Node norm_regex(const Json& value) {
    auto compiled = mango_regex::compile(value.get_ref<const std::string&>());
    if (auto* e = std::get_if<mango_regex::CompileError>(&compiled)) {
      return fail(bad_arg("$regex", value,
                          e->unsupported ? " (not supported by Chaise: " + e->what + ")" : ""));
    }
    Node n = terminal(Op::kRegex, value);
    n.regex = std::get<std::shared_ptr<const mango_regex::Regex>>(std::move(compiled));
    return n;
  }

  Node negate(Node n) {
    if (error) return n;
    switch (n.op) {
      case Op::kNot:
        return norm_negations(std::move(n.children.front()));
      case Op::kNor:
        for (Node& c : n.children) c = norm_negations(std::move(c));
        n.op = Op::kOr;
        return n;
      case Op::kAnd:
      case Op::kOr:
        for (Node& c : n.children) c = negate(std::move(c));
        n.op = n.op == Op::kAnd ? Op::kOr : Op::kAnd;
        return n;
      case Op::kDefault:
        return fail(bad_arg("$not", n.arg));
      case Op::kField:
        n.children.front() = negate(std::move(n.children.front()));
        return n;
      case Op::kLt:
        n.op = Op::kGte;
        return n;
      case Op::kLte:
        n.op = Op::kGt;
        return n;
      case Op::kEq:
        n.op = Op::kNe;
        return n;
      case Op::kNe:
        n.op = Op::kEq;
        return n;
      case Op::kGte:
        n.op = Op::kLt;
        return n;
      case Op::kGt:
        n.op = Op::kLte;
        return n;
      case Op::kIn:
        n.op = Op::kNin;
        return n;
      case Op::kNin:
        n.op = Op::kIn;
        return n;
      case Op::kExists:
        n.arg = !n.arg.get<bool>();
        return n;
      default: {  // any other operator keeps an explicit $not
        std::vector<Node> child;
        child.push_back(std::move(n));
        return with_children(Op::kNot, std::move(child));
      }
    }
  }
};

// ---- Matching (mango_selector:match/3) --------------------------------------------------------

// kFault: CouchDB raises an error here. Only $nor can cause it: norm_negations never reaches
// inside $elemMatch/$allMatch/$keyMapMatch, and match/3 has no clause for $nor, so it throws
// invalid_operator; those three operators catch every error and answer false. Chaise answers
// the same way instead of failing the request.
enum class Truth : std::uint8_t { kFalse, kTrue, kFault };

Truth truth(bool b) { return b ? Truth::kTrue : Truth::kFalse; }

bool is_id_path(const Path& path) { return path.size() == 1 && path.front() == "_id"; }

bool match_in(const Json& args, const Json& value, Collation c) {
  auto equals_any_arg = [&](const Json& v) {
    for (const Json& a : args) {
      if (compare(v, a, c) == 0) return true;
    }
    return false;
  };
  if (!value.is_array()) return equals_any_arg(value);
  for (const Json& v : value) {
    if (equals_any_arg(v)) return true;
  }
  return false;
}

bool match_all(const Json& args, const Json& value) {
  if (args.empty() || !value.is_array()) return false;
  bool has_all = true;
  for (const Json& a : args) {
    bool member = false;
    for (const Json& v : value) {
      if (term_equal(a, v, NumberEquality::kExact)) {
        member = true;
        break;
      }
    }
    if (!member) {
      has_all = false;
      break;
    }
  }
  const bool is_args = args.size() == 1 && args[0].is_array() &&
                       term_equal(args[0], value, NumberEquality::kArithmetic);
  return has_all || is_args;
}

bool match_mod(const Json& arg, const Json& value) {
  const auto v = integer_of(value);
  if (!v) return false;  // integers only: 4.0 is a float
  const Int128 divisor = *integer_of(arg[0]);
  const Int128 remainder = *integer_of(arg[1]);
  return *v % divisor == remainder;  // Erlang's rem: truncated, the dividend's sign
}

Truth match(const Node& n, const Json& value, Collation c);

// $elemMatch/$keyMapMatch: true if any item matches; an error stops the scan as false.
template <typename Items>
Truth match_any(const Node& sub, const Items& items, Collation c) {
  for (const Json& item : items) {
    const Truth t = match(sub, item, c);
    if (t == Truth::kTrue) return Truth::kTrue;
    if (t == Truth::kFault) return Truth::kFalse;
  }
  return Truth::kFalse;
}

Truth match_field(const Node& n, const Json& value, Collation c) {
  const Node& condition = n.children.front();
  const Json* found = nullptr;
  switch (get_field(value, n.path, &found)) {
    case Lookup::kFound:
      return match(condition, *found, is_id_path(n.path) ? Collation::kErlangTerm : c);
    case Lookup::kNotFound:
      return truth(condition.op == Op::kExists && !condition.arg.get<bool>());
    case Lookup::kBadPath:
      break;
  }
  return Truth::kFalse;
}

// Recursion follows the selector tree only (bounded by kSelectorDepthMax); document values are
// reached by iteration (get_field) and compared by compare(), bounded by the argument.
Truth match(const Node& n, const Json& value, Collation c) {
  switch (n.op) {
    case Op::kAnd:
      for (const Node& child : n.children) {
        if (const Truth t = match(child, value, c); t != Truth::kTrue) return t;
      }
      return Truth::kTrue;
    case Op::kOr:
      if (n.children.empty()) return Truth::kTrue;
      for (const Node& child : n.children) {
        if (const Truth t = match(child, value, c); t != Truth::kFalse) return t;
      }
      return Truth::kFalse;
    case Op::kNor:
      return Truth::kFault;
    case Op::kNot: {
      const Truth t = match(n.children.front(), value, c);
      return t == Truth::kFault ? t : truth(t == Truth::kFalse);
    }
    case Op::kField:
      return match_field(n, value, c);
    case Op::kElemMatch:
      if (!value.is_array()) return Truth::kFalse;
      return match_any(n.children.front(), value, c);
    case Op::kAllMatch:
      if (!value.is_array() || value.empty()) return Truth::kFalse;
      for (const Json& item : value) {
        if (match(n.children.front(), item, c) != Truth::kTrue) return Truth::kFalse;
      }
      return Truth::kTrue;
    case Op::kKeyMapMatch: {
      if (!value.is_object()) return Truth::kFalse;
      std::vector<Json> keys;
      keys.reserve(value.size());
      for (auto it = value.begin(); it != value.end(); ++it) keys.emplace_back(it.key());
      return match_any(n.children.front(), keys, c);
    }
    case Op::kEq:
      return truth(compare(value, n.arg, c) == 0);
    case Op::kNe:
      return truth(compare(value, n.arg, c) != 0);
    case Op::kLt:
      return truth(compare(value, n.arg, c) < 0);
    case Op::kLte:
      return truth(compare(value, n.arg, c) <= 0);
    case Op::kGt:
      return truth(compare(value, n.arg, c) > 0);
    case Op::kGte:
      return truth(compare(value, n.arg, c) >= 0);
    case Op::kIn:
      return truth(!n.arg.empty() && match_in(n.arg, value, c));
    case Op::kNin:
      if (n.arg.empty()) return Truth::kTrue;
      if (value.is_array()) return truth(!match_in(n.arg, value, c));
      for (const Json& a : n.arg) {
        if (compare(value, a, c) == 0) return Truth::kFalse;
      }
      return Truth::kTrue;
    case Op::kAll:
      return truth(match_all(n.arg, value));
    case Op::kExists:  // the value is there; a missing one is decided in match_field
      return truth(n.arg.get<bool>());
    case Op::kType:
      return truth(type_name(value) == n.arg.get_ref<const std::string&>());
    case Op::kMod:
      return truth(match_mod(n.arg, value));
    case Op::kSize:
      return truth(value.is_array() && compare_numbers(Json(value.size()), n.arg) == 0);
    case Op::kRegex:
      return truth(value.is_string() &&
                   mango_regex::search(*n.regex, value.get_ref<const std::string&>()));
    case Op::kBeginsWith:
      return truth(value.is_string() && value.get_ref<const std::string&>().starts_with(
                                            n.arg.get_ref<const std::string&>()));
    case Op::kDefault:  // $text: CouchDB trusts the text index, which has already matched
      return Truth::kTrue;
  }
  return Truth::kFalse;
}

}  // namespace

// ---- Selector ---------------------------------------------------------------------------------

std::string erlang_term_text(const Json& j, bool pretty) {
  std::string out;
  append_erlang_term(out, j, pretty);
  return out;
}

namespace {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kAnd:
      return "$and";
    case Op::kOr:
      return "$or";
    case Op::kNor:
      return "$nor";
    case Op::kNot:
      return "$not";
    case Op::kEq:
      return "$eq";
    case Op::kNe:
      return "$ne";
    case Op::kLt:
      return "$lt";
    case Op::kLte:
      return "$lte";
    case Op::kGt:
      return "$gt";
    case Op::kGte:
      return "$gte";
    case Op::kIn:
      return "$in";
    case Op::kNin:
      return "$nin";
    case Op::kAll:
      return "$all";
    case Op::kExists:
      return "$exists";
    case Op::kType:
      return "$type";
    case Op::kMod:
      return "$mod";
    case Op::kSize:
      return "$size";
    case Op::kRegex:
      return "$regex";
    case Op::kBeginsWith:
      return "$beginsWith";
    case Op::kElemMatch:
      return "$elemMatch";
    case Op::kAllMatch:
      return "$allMatch";
    case Op::kKeyMapMatch:
      return "$keyMapMatch";
    case Op::kField:
    case Op::kDefault:
      break;
  }
  return "";
}

// The tree as mango_selector:normalize/1 writes it. Recursion is bounded by kSelectorDepthMax,
// which parse() checked.
Json render(const Node& n) {
  Json out = Json::object();
  switch (n.op) {
    case Op::kAnd:
    case Op::kOr:
    case Op::kNor: {
      Json list = Json::array();
      for (const Node& c : n.children) list.push_back(render(c));
      out[std::string(op_name(n.op))] = std::move(list);
      return out;
    }
    case Op::kField:
      out[n.field] = render(n.children.front());
      return out;
    case Op::kNot:
    case Op::kElemMatch:
    case Op::kAllMatch:
    case Op::kKeyMapMatch:
      out[std::string(op_name(n.op))] = render(n.children.front());
      return out;
    case Op::kDefault:
      return n.arg;
    default:
      out[std::string(op_name(n.op))] = n.arg;
      return out;
  }
}

}  // namespace

Json Selector::normal_form() const { return root_ ? render(*root_) : Json::object(); }

std::variant<Selector, CouchError> Selector::parse(const Json& selector) {
  // mango_selector:normalize's error for a non-object (couch_changes:check_selector/1 words
  // its own; _changes replaces it).
  if (!selector.is_object())
    return err::invalid_selector_json("Selector must be a JSON object, not: " +
                                      erlang_term_text(selector));
  if (deeper_than(selector, kSelectorDepthMax)) {
    return err::bad_request("Selector is nested too deeply: more than " +
                            std::to_string(kSelectorDepthMax) + " levels of arrays and objects");
  }
  if (selector.empty()) return Selector(nullptr);

  Normalizer normalizer;
  Node root = normalizer.norm_ops(selector);
  if (!normalizer.error) root = normalizer.norm_fields(std::move(root), {});
  if (!normalizer.error) root = normalizer.norm_negations(std::move(root));
  if (normalizer.error) return *std::move(normalizer.error);
  if (root.op == Op::kField && root.path.empty()) {
    return err::invalid_selector("One or more conditions is missing a field name.");
  }
  return Selector(std::make_shared<const Node>(std::move(root)));
}

bool Selector::matches(const Json& doc) const {
  if (!root_) return true;
  return match(*root_, doc, Collation::kCouch) == Truth::kTrue;
}

}  // namespace chaise::core
