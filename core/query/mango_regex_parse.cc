// core/query/mango_regex_parse.cc — PCRE's pattern syntax, read into the AST of mango_regex_ast.h.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/query/mango_regex_ast.h"

namespace chaise::core::mango_regex {
namespace {

struct Flags {
  bool caseless = false;   // i
  bool multiline = false;  // m
  bool dotall = false;     // s
  bool extended = false;   // x
};

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

ByteSet range(int lo, int hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<std::size_t>(c));
  return s;
}

ByteSet bytes_of(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s.set(static_cast<unsigned char>(c));
  return s;
}

// PCRE's character types for 8-bit subjects without UCP (C locale tables).
ByteSet digit_set() { return range('0', '9'); }
ByteSet word_set() { return range('a', 'z') | range('A', 'Z') | range('0', '9') | bytes_of("_"); }
ByteSet space_set() { return bytes_of(" \t\n\v\f\r"); }
ByteSet hspace_set() { return bytes_of(" \t\xA0"); }
ByteSet vspace_set() { return range(0x0A, 0x0D) | bytes_of("\x85"); }

std::optional<ByteSet> posix_class(std::string_view name) {
  if (name == "alpha") return range('a', 'z') | range('A', 'Z');
  if (name == "digit") return digit_set();
  if (name == "alnum") return range('a', 'z') | range('A', 'Z') | digit_set();
  if (name == "space") return space_set();
  if (name == "upper") return range('A', 'Z');
  if (name == "lower") return range('a', 'z');
  if (name == "punct") return range('!', '/') | range(':', '@') | range('[', '`') | range('{', '~');
  if (name == "xdigit") return digit_set() | range('a', 'f') | range('A', 'F');
  if (name == "word") return word_set();
  if (name == "blank") return bytes_of(" \t");
  if (name == "cntrl") return range(0, 31) | range(127, 127);
  if (name == "graph") return range(33, 126);
  if (name == "print") return range(32, 126);
  if (name == "ascii") return range(0, 127);
  return std::nullopt;
}

// Adds the other ASCII case of every letter in `s` (PCRE's default tables fold ASCII only).
void fold_case(ByteSet& s) {
  for (int c = 'a'; c <= 'z'; ++c) {
    const auto lower = static_cast<std::size_t>(c);
    const auto upper = static_cast<std::size_t>(c - 'a' + 'A');
    if (s[lower] || s[upper]) {
      s.set(lower);
      s.set(upper);
    }
  }
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  // The AST of the whole pattern, or nullopt with error() set.
  std::optional<Ast> parse() {
    Ast root;
    if (!parse_alternation(&root)) return std::nullopt;
    if (!at_end()) {  // only a ')' stops a top-level alternation early
      fail("unmatched closing parenthesis");
      return std::nullopt;
    }
    return root;
  }

  const CompileError& error() const { return error_; }

 private:
  bool at_end() const { return i_ >= p_.size(); }
  char peek(std::size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0'; }
  bool fail(std::string what) {
    error_ = {false, std::move(what)};
    return false;
  }
  bool unsupported(std::string what) {
    error_ = {true, std::move(what)};
    return false;
  }

  Ast byte_atom(unsigned char c) const {
    Ast a;
    a.kind = Ast::Kind::kBytes;
    a.bytes.set(c);
    if (flags_.caseless) fold_case(a.bytes);
    return a;
  }
  static Ast set_atom(const ByteSet& s) {
    Ast a;
    a.kind = Ast::Kind::kBytes;
    a.bytes = s;
    return a;
  }
  static Ast assert_atom(Assertion kind) {
    Ast a;
    a.kind = Ast::Kind::kAssert;
    a.assertion = kind;
    return a;
  }

  // Skips what PCRE ignores between items: (?#...) comments, stray \E, and under (?x) white
  // space and #-comments.
  bool skip_ignorable() {
    while (!at_end()) {
      const char c = peek();
      if (flags_.extended &&
          (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r')) {
        ++i_;
      } else if (flags_.extended && c == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else if (c == '(' && peek(1) == '?' && peek(2) == '#') {
        const std::size_t close = p_.find(')', i_);
        if (close == std::string_view::npos) return fail("missing ) after (?# comment");
        i_ = close + 1;
      } else if (c == '\\' && peek(1) == 'E') {
        i_ += 2;
      } else {
        break;
      }
    }
    return true;
  }

  bool parse_alternation(Ast* out) {
    std::vector<Ast> branches(1);
    if (!parse_concat(&branches.back())) return false;
    while (peek() == '|' && !at_end()) {
      ++i_;
      branches.emplace_back();
      if (!parse_concat(&branches.back())) return false;
    }
    if (branches.size() == 1) {
      *out = std::move(branches.front());
    } else {
      out->kind = Ast::Kind::kAlternate;
      out->children = std::move(branches);
    }
    return true;
  }

  bool parse_concat(Ast* out) {
    std::vector<Ast> items;
    while (true) {
      if (!skip_ignorable()) return false;
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (!parse_quantified(&items)) return false;
    }
    if (items.size() == 1) {
      *out = std::move(items.front());
    } else if (!items.empty()) {
      out->kind = Ast::Kind::kConcat;
      out->children = std::move(items);
    }
    return true;
  }

  // One item and its quantifier, if any, appended to `items`.
  bool parse_quantified(std::vector<Ast>* items) {
    Ast atom;
    bool repeatable = true;
    if (peek() == '\\' && peek(1) == 'Q') {
      // \Q...\E: literal bytes; a quantifier after it applies to the last one.
      i_ += 2;
      std::string quoted;
      while (!at_end() && !(peek() == '\\' && peek(1) == 'E')) quoted.push_back(p_[i_++]);
      if (!at_end()) i_ += 2;
      if (quoted.empty()) return true;
      for (std::size_t k = 0; k + 1 < quoted.size(); ++k) {
        items->push_back(byte_atom(static_cast<unsigned char>(quoted[k])));
      }
      atom = byte_atom(static_cast<unsigned char>(quoted.back()));
    } else if (!parse_atom(&atom, &repeatable)) {
      return false;
    }
    if (!skip_ignorable()) return false;
    int min = 0;
    int max = 0;
    bool quantified = false;
    if (!parse_quantifier(&min, &max, &quantified)) return false;
    if (quantified) {
      if (!repeatable) {
        return atom.kind == Ast::Kind::kAssert
                   ? unsupported("a quantifier on an assertion")
                   : fail("quantifier does not follow a repeatable item");
      }
      if (peek() == '+') return unsupported("possessive quantifiers");
      if (peek() == '?') ++i_;  // lazy: the same language
      if (!skip_ignorable()) return false;
      bool again = false;
      int unused_min = 0;
      int unused_max = 0;
      const std::size_t before = i_;
      if (!parse_quantifier(&unused_min, &unused_max, &again)) return false;
      if (again) {
        i_ = before;
        return unsupported("a quantifier following a quantifier");
      }
      Ast repeat;
      repeat.kind = Ast::Kind::kRepeat;
      repeat.min = min;
      repeat.max = max;
      repeat.children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    items->push_back(std::move(atom));
    return true;
  }

  // Reads {n}, {n,} or {n,m} at i_ without consuming it; false if the text is not one (PCRE
  // then takes '{' literally).
  bool brace_quantifier_at(std::size_t at, int* min, int* max, std::size_t* next) const {
    std::size_t k = at + 1;
    auto read_number = [&](long* value) {
      const std::size_t start = k;
      *value = 0;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') {
        if (*value <= kQuantifierMax) *value = *value * 10 + (p_[k] - '0');
        ++k;
      }
      return k > start;
    };
    long lo = 0;
    long hi = 0;
    if (!read_number(&lo)) return false;
    if (k < p_.size() && p_[k] == '}') {
      hi = lo;
    } else if (k < p_.size() && p_[k] == ',') {
      ++k;
      if (!read_number(&hi)) hi = kUnbounded;
      if (k >= p_.size() || p_[k] != '}') return false;
    } else {
      return false;
    }
    *min = static_cast<int>(std::min<long>(lo, kQuantifierMax + 1));
    *max = hi == kUnbounded ? kUnbounded : static_cast<int>(std::min<long>(hi, kQuantifierMax + 1));
    *next = k + 1;
    return true;
  }

  bool parse_quantifier(int* min, int* max, bool* quantified) {
    *quantified = false;
    if (at_end()) return true;
    switch (peek()) {
      case '*':
        *min = 0;
        *max = kUnbounded;
        break;
      case '+':
        *min = 1;
        *max = kUnbounded;
        break;
      case '?':
        *min = 0;
        *max = 1;
        break;
      case '{': {
        std::size_t next = 0;
        if (!brace_quantifier_at(i_, min, max, &next)) return true;
        if (*min > kQuantifierMax || *max > kQuantifierMax) {
          return fail("number too big in {} quantifier");
        }
        if (*max != kUnbounded && *max < *min) return fail("numbers out of order in {} quantifier");
        i_ = next;
        *quantified = true;
        return true;
      }
      default:
        return true;
    }
    ++i_;
    *quantified = true;
    return true;
  }

  bool parse_atom(Ast* out, bool* repeatable) {
    const char c = p_[i_];
    switch (c) {
      case '(':
        return parse_group(out, repeatable);
      case '[': {
        ++i_;
        ByteSet set;
        if (!parse_class(&set)) return false;
        *out = set_atom(set);
        return true;
      }
      case '.': {
        ++i_;
        ByteSet all;
        all.set();
        if (!flags_.dotall) all.reset('\n');
        *out = set_atom(all);
        return true;
      }
      case '^':
        ++i_;
        *out = assert_atom(flags_.multiline ? Assertion::kBeginLine : Assertion::kBeginText);
        *repeatable = false;
        return true;
      case '$':
        ++i_;
        *out =
            assert_atom(flags_.multiline ? Assertion::kEndLine : Assertion::kEndTextOrFinalNewline);
        *repeatable = false;
        return true;
      case '\\':
        return parse_escape(out, repeatable);
      case '*':
      case '+':
      case '?':
        return fail("quantifier does not follow a repeatable item");
      case '{': {
        int lo = 0;
        int hi = 0;
        std::size_t next = 0;
        if (brace_quantifier_at(i_, &lo, &hi, &next)) {
          return fail("quantifier does not follow a repeatable item");
        }
        break;
      }
      default:
        break;
    }
    ++i_;
    *out = byte_atom(static_cast<unsigned char>(c));
    return true;
  }

  // After the '(' at i_.
  bool parse_group(Ast* out, bool* repeatable) {
    ++i_;
    if (depth_ >= kRegexNestingMax) return fail("parentheses are too deeply nested");
    const Flags saved = flags_;
    if (peek() == '*') return unsupported("backtracking control verbs");
    if (peek() == '?') {
      ++i_;
      const char k = peek();
      if (k == ':' || k == '|') {
        ++i_;
      } else if (k == '<' && (peek(1) == '=' || peek(1) == '!')) {
        return unsupported("lookbehind assertions");
      } else if (k == '<' || k == '\'') {
        ++i_;
        if (!skip_group_name(k == '<' ? '>' : '\'')) return false;
      } else if (k == 'P') {
        if (peek(1) == '=' || peek(1) == '>') return unsupported("backreferences and recursion");
        if (peek(1) != '<') return fail("unrecognized character after (?P");
        i_ += 2;
        if (!skip_group_name('>')) return false;
      } else if (k == '=' || k == '!') {
        return unsupported("lookahead assertions");
      } else if (k == '>') {
        return unsupported("atomic groups");
      } else if (k == '(') {
        return unsupported("conditional groups");
      } else if (k == 'R' || k == '&' || k == '+' || (k >= '0' && k <= '9') ||
                 (k == '-' && peek(1) >= '0' && peek(1) <= '9')) {
        return unsupported("recursion");
      } else if (k == 'C') {
        return unsupported("callouts");
      } else {
        Flags flags = flags_;
        if (!parse_flags(&flags)) return false;
        if (peek() == ')') {  // (?i): for the rest of the enclosing group
          ++i_;
          flags_ = flags;
          *repeatable = false;
          *out = Ast{};
          return true;
        }
        ++i_;  // ':'
        flags_ = flags;
      }
    }
    ++depth_;
    const bool ok = parse_alternation(out);
    --depth_;
    if (!ok) return false;
    if (peek() != ')' || at_end()) return fail("missing closing parenthesis");
    ++i_;
    flags_ = saved;
    return true;
  }

  bool skip_group_name(char terminator) {
    const std::size_t start = i_;
    while (!at_end() && is_word_byte(static_cast<unsigned char>(peek()))) ++i_;
    if (i_ == start || (p_[start] >= '0' && p_[start] <= '9') || peek() != terminator || at_end()) {
      return fail("syntax error in subpattern name (missing terminator?)");
    }
    ++i_;
    return true;
  }

  // Option letters up to ')' or ':' (left unconsumed).
  bool parse_flags(Flags* flags) {
    bool on = true;
    while (!at_end() && peek() != ')' && peek() != ':') {
      switch (peek()) {
        case 'i':
          flags->caseless = on;
          break;
        case 'm':
          flags->multiline = on;
          break;
        case 's':
          flags->dotall = on;
          break;
        case 'x':
          flags->extended = on;
          break;
        case 'U':  // ungreedy and duplicate names change nothing for "is there a match"
        case 'J':
          break;
        case '-':
          if (!on) return fail("unrecognized character after (? or (?-");
          on = false;
          break;
        default:
          return fail("unrecognized character after (? or (?-");
      }
      ++i_;
    }
    if (at_end()) return fail("missing closing parenthesis");
    return true;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Escapes that stand for one byte, after the backslash (i_ at the letter). Returns 1 with
  // *byte set, 0 if `e` is not such an escape (nothing consumed), -1 on error.
  int parse_byte_escape(bool in_class, int* byte) {
    const char e = peek();
    switch (e) {
      case 'n':
        *byte = '\n';
        break;
      case 'r':
        *byte = '\r';
        break;
      case 't':
        *byte = '\t';
        break;
      case 'f':
        *byte = '\f';
        break;
      case 'e':
        *byte = 0x1B;
        break;
      case 'a':
        *byte = 0x07;
        break;
      case 'b':
        if (!in_class) return 0;
        *byte = 0x08;
        break;
      case 'c': {
        const auto x = static_cast<unsigned char>(peek(1));
        if (i_ + 1 >= p_.size() || x < 0x20 || x > 0x7E) {
          fail("\\c must be followed by a printable ASCII character");
          return -1;
        }
        *byte = (x >= 'a' && x <= 'z' ? x - 'a' + 'A' : x) ^ 0x40;
        i_ += 2;
        return 1;
      }
      case 'x': {
        ++i_;
        int value = 0;
        if (peek() == '{' && !at_end()) {
          ++i_;
          const std::size_t start = i_;
          while (!at_end() && hex_value(peek()) >= 0) {
            if (value <= 0xFF) value = value * 16 + hex_value(peek());
            ++i_;
          }
          if (i_ == start || peek() != '}' || at_end()) {
            fail("\\x{ must be followed by hex digits and }");
            return -1;
          }
          ++i_;
        } else {
          for (int k = 0; k < 2 && !at_end() && hex_value(peek()) >= 0; ++k, ++i_) {
            value = value * 16 + hex_value(peek());
          }
        }
        if (value > 0xFF) {
          fail("character code point value in \\x{} or \\o{} is too large");
          return -1;
        }
        *byte = value;
        return 1;
      }
      case 'o': {
        ++i_;
        if (peek() != '{' || at_end()) {
          fail("missing opening brace after \\o");
          return -1;
        }
        ++i_;
        int value = 0;
        const std::size_t start = i_;
        while (!at_end() && peek() >= '0' && peek() <= '7') {
          if (value <= 0xFF) value = value * 8 + (peek() - '0');
          ++i_;
        }
        if (i_ == start || peek() != '}' || at_end() || value > 0xFF) {
          fail("character code point value in \\x{} or \\o{} is too large");
          return -1;
        }
        ++i_;
        *byte = value;
        return 1;
      }
      default: {
        // \0 plus up to two octal digits; in a class \1..\7 are octal as well.
        const bool octal = e == '0' || (in_class && e >= '1' && e <= '7');
        if (!octal) return 0;
        int value = 0;
        for (int k = 0; k < 3 && !at_end() && peek() >= '0' && peek() <= '7'; ++k, ++i_) {
          value = value * 8 + (peek() - '0');
        }
        *byte = value & 0xFF;
        return 1;
      }
    }
    ++i_;
    return 1;
  }

  // \d \D \w \W \s \S \h \H \v \V at i_ (the letter): consumes it and sets *set.
  bool parse_type_escape(ByteSet* set) {
    ByteSet s;
    switch (peek()) {
      case 'd':
      case 'D':
        s = digit_set();
        break;
      case 'w':
      case 'W':
        s = word_set();
        break;
      case 's':
      case 'S':
        s = space_set();
        break;
      case 'h':
      case 'H':
        s = hspace_set();
        break;
      case 'v':
      case 'V':
        s = vspace_set();
        break;
      default:
        return false;
    }
    if (peek() >= 'A' && peek() <= 'Z') s.flip();
    ++i_;
    *set = s;
    return true;
  }

  // Errors for the escapes neither table above knows (i_ at the escaped letter or digit).
  bool other_escape_error(bool in_class) {
    const char e = peek();
    if (!in_class && e >= '1' && e <= '9') return unsupported("backreferences");
    if (e == 'p' || e == 'P') return unsupported("\\p and \\P (Unicode properties)");
    if (e == 'L' || e == 'l' || e == 'U' || e == 'u') {
      return fail("PCRE does not support \\L, \\l, \\N{name}, \\U, or \\u");
    }
    if (in_class && std::string_view("ABCGKNRXZgkz").find(e) != std::string_view::npos) {
      return fail("escape sequence is invalid in character class");
    }
    if (e == 'g' || e == 'k') return unsupported("backreferences");
    if (std::string_view("CKNRX").find(e) != std::string_view::npos) {
      return unsupported(std::string("\\") + e);
    }
    // PCRE 8 (Erlang/OTP up to 27) reads other letters literally, PCRE2 refuses them.
    return unsupported(std::string("unknown escapes such as \\") + e);
  }

  static bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  }

  // After the '\\' at i_, outside a class.
  bool parse_escape(Ast* out, bool* repeatable) {
    ++i_;
    if (at_end()) return fail("\\ at end of pattern");
    const char e = peek();
    ByteSet set;
    if (parse_type_escape(&set)) {
      *out = set_atom(set);
      return true;
    }
    int byte = 0;
    const int r = parse_byte_escape(false, &byte);
    if (r < 0) return false;
    if (r > 0) {
      *out = byte_atom(static_cast<unsigned char>(byte));
      return true;
    }
    std::optional<Assertion> assertion;
    switch (e) {
      case 'b':
        assertion = Assertion::kWordBoundary;
        break;
      case 'B':
        assertion = Assertion::kNotWordBoundary;
        break;
      case 'A':
      case 'G':  // the start of the match attempt: CouchDB searches from offset 0 only
        assertion = Assertion::kBeginText;
        break;
      case 'z':
        assertion = Assertion::kEndText;
        break;
      case 'Z':
        assertion = Assertion::kEndTextOrFinalNewline;
        break;
      default:
        break;
    }
    if (assertion) {
      ++i_;
      *out = assert_atom(*assertion);
      *repeatable = false;
      return true;
    }
    if (is_alnum(e)) return other_escape_error(false);
    ++i_;
    *out = byte_atom(static_cast<unsigned char>(e));
    return true;
  }

  // One class member at i_: a byte (*is_set false) or a set.
  bool parse_class_atom(int* byte, ByteSet* set, bool* is_set) {
    *is_set = false;
    const char c = p_[i_];
    if (c != '\\') {
      ++i_;
      *byte = static_cast<unsigned char>(c);
      return true;
    }
    ++i_;
    if (at_end()) return fail("\\ at end of pattern");
    if (parse_type_escape(set)) {
      *is_set = true;
      return true;
    }
    const int r = parse_byte_escape(true, byte);
    if (r < 0) return false;
    if (r > 0) return true;
    const char e = peek();
    if (e == '8' || e == '9') {  // PCRE takes them literally in a class
      ++i_;
      *byte = static_cast<unsigned char>(e);
      return true;
    }
    if (e == 'Q' || e == 'E') return unsupported("\\Q and \\E inside a character class");
    if (is_alnum(e)) return other_escape_error(true);
    ++i_;
    *byte = static_cast<unsigned char>(e);
    return true;
  }

  // [:name:] or [:^name:] at i_ ('['); false with nothing consumed if it is not one.
  bool try_posix_class(ByteSet* set, bool* failed) {
    *failed = false;
    if (peek() != '[' || (peek(1) != ':' && peek(1) != '.' && peek(1) != '=')) return false;
    const char kind = peek(1);
    std::size_t k = i_ + 2;
    while (k < p_.size() && (is_alnum(p_[k]) || p_[k] == '^')) ++k;
    if (k + 1 >= p_.size() || p_[k] != kind || p_[k + 1] != ']') return false;
    if (kind != ':') {
      *failed = true;
      return fail("POSIX collating elements are not supported");
    }
    std::string_view name = p_.substr(i_ + 2, k - (i_ + 2));
    const bool negate = !name.empty() && name.front() == '^';
    if (negate) name.remove_prefix(1);
    auto s = posix_class(name);
    if (!s) {
      *failed = true;
      return fail("unknown POSIX class name");
    }
    *set = negate ? ~*s : *s;
    i_ = k + 2;
    return true;
  }

  // After the '[' at i_.
  bool parse_class(ByteSet* out) {
    bool negate = false;
    if (peek() == '^' && !at_end()) {
      negate = true;
      ++i_;
    }
    ByteSet set;
    bool first = true;
    while (true) {
      if (at_end()) return fail("missing terminating ] for character class");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      ByteSet member;
      bool posix_failed = false;
      if (try_posix_class(&member, &posix_failed)) {
        set |= member;
        continue;
      }
      if (posix_failed) return false;
      int lo = 0;
      bool is_set = false;
      if (!parse_class_atom(&lo, &member, &is_set)) return false;
      if (is_set) {
        set |= member;
        continue;
      }
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        int hi = 0;
        bool hi_failed = false;
        ByteSet ignored;
        if (try_posix_class(&ignored, &hi_failed) || hi_failed) {
          return hi_failed ? false : fail("invalid range in character class");
        }
        if (!parse_class_atom(&hi, &ignored, &is_set)) return false;
        if (is_set) return fail("invalid range in character class");
        if (hi < lo) return fail("range out of order in character class");
        set |= range(lo, hi);
        continue;
      }
      set.set(static_cast<std::size_t>(lo));
    }
    if (flags_.caseless) fold_case(set);
    *out = negate ? ~set : set;
    return true;
  }

  std::string_view p_;
  std::size_t i_ = 0;
  Flags flags_;
  int depth_ = 0;
  CompileError error_;
};

}  // namespace

std::variant<Ast, CompileError> parse(std::string_view pattern) {
  Parser parser(pattern);
  std::optional<Ast> ast = parser.parse();
  if (!ast) return parser.error();
  return std::move(*ast);
}

}  // namespace chaise::core::mango_regex
