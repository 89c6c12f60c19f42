// core/query/mango_regex.cc — $regex: what a parsed pattern can match at its ends, its translation to
// RE2, and the search.
// See mango_regex.h for the contract and for how PCRE's end-of-subject rules are kept.
#include "core/query/mango_regex.h"

#include <re2/re2.h>

#include <algorithm>
#include <bitset>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/query/mango_regex_ast.h"

namespace chaise::core::mango_regex {
namespace {

// Instructions of a Thompson NFA for `a` (counted repetition expanded), saturating just past the
// limit: the size bound compile() applies before any translation.
std::size_t program_size(const Ast& a) {
  static constexpr std::size_t kCap = kRegexProgramSizeMax + 1;
  auto add = [](std::size_t x, std::size_t y) { return std::min(kCap, x + y); };
  auto mul = [](std::size_t x, std::size_t n) {
    return x == 0 ? 0 : (n >= kCap / x + 1 ? kCap : std::min(kCap, x * n));
  };
  switch (a.kind) {
    case Ast::Kind::kEmpty:
      return 0;
    case Ast::Kind::kBytes:
    case Ast::Kind::kAssert:
      return 1;
    case Ast::Kind::kConcat:
    case Ast::Kind::kAlternate: {
      std::size_t n = a.kind == Ast::Kind::kAlternate ? 2 * (a.children.size() - 1) : 0;
      for (const Ast& c : a.children) n = add(n, program_size(c));
      return n;
    }
    case Ast::Kind::kRepeat: {
      const std::size_t s = program_size(a.children.front());
      const auto min = static_cast<std::size_t>(a.min);
      if (a.max == kUnbounded) return min == 0 ? add(s, 2) : add(mul(s, min), 1);
      return add(mul(s, min), mul(add(s, 1), static_cast<std::size_t>(a.max) - min));
    }
  }
  return kCap;
}

// ---- What can follow each assertion -------------------------------------------------------
// The three search strategies (mango_regex.h) are exact unless an assertion meets one of the
// conditions below; compile() refuses those patterns, or picks the strategy they need.

// Whether each node of a pattern can match without consuming a byte (assertions count as
// holding), and the bytes it can consume first: computed once, bottom-up, because asking at every
// level of analyze() would cost the pattern's size times its depth.
class Summaries {
 public:
  explicit Summaries(const Ast& root) { visit(root); }
  bool nullable(const Ast& a) const { return of_.at(&a).nullable; }
  const ByteSet& first(const Ast& a) const { return of_.at(&a).first; }

 private:
  struct Summary {
    bool nullable = true;
    ByteSet first;
  };
  // References into the map stay valid as it grows (its nodes never move).
  const Summary& visit(const Ast& a) {
    Summary s;
    switch (a.kind) {
      case Ast::Kind::kEmpty:
      case Ast::Kind::kAssert:
        break;
      case Ast::Kind::kBytes:
        s.nullable = false;
        s.first = a.bytes;
        break;
      case Ast::Kind::kConcat:
        // The first bytes of each child up to the first one that must consume.
        for (const Ast& c : a.children) {
          const Summary& cs = visit(c);
          if (s.nullable) s.first |= cs.first;
          s.nullable = s.nullable && cs.nullable;
        }
        break;
      case Ast::Kind::kAlternate:
        s.nullable = false;
        for (const Ast& c : a.children) {
          const Summary& cs = visit(c);
          s.first |= cs.first;
          s.nullable = s.nullable || cs.nullable;
        }
        break;
      case Ast::Kind::kRepeat: {
        const Summary& cs = visit(a.children.front());
        s.nullable = a.min == 0 || cs.nullable;
        if (a.max != 0) s.first = cs.first;
        break;
      }
    }
    return of_[&a] = s;
  }
  std::unordered_map<const Ast*, Summary> of_;
};

// What may come right after a point of the pattern.
struct Follow {
  ByteSet first;         // bytes the next consumed byte may be
  bool may_end = false;  // the match may end there without consuming anything more
};

Follow preceded_by(const Ast& a, const Follow& after, const Summaries& sum) {
  if (!sum.nullable(a)) return {sum.first(a), false};
  return {sum.first(a) | after.first, after.may_end};
}

struct Facts {
  bool begin_line_may_end = false;     // a multiline ^ that may end the match
  bool end_line_then_newline = false;  // $ (any kind) followed by something that takes "\n"
  bool end_text_then_newline = false;  // $ or \Z (not multiline) followed by the same
  bool has_end_text = false;           // \z
  bool has_not_word_boundary = false;  // \B
};

void analyze(const Ast& a, const Follow& after, const Summaries& sum, Facts& facts) {
  switch (a.kind) {
    case Ast::Kind::kEmpty:
    case Ast::Kind::kBytes:
      return;
    case Ast::Kind::kAssert: {
      const bool newline_next = after.first['\n'];
      switch (a.assertion) {
        case Assertion::kBeginLine:
          facts.begin_line_may_end |= after.may_end;
          break;
        case Assertion::kEndTextOrFinalNewline:
          facts.end_text_then_newline |= newline_next;
          facts.end_line_then_newline |= newline_next;
          break;
        case Assertion::kEndLine:
          facts.end_line_then_newline |= newline_next;
          break;
        case Assertion::kEndText:
          facts.has_end_text = true;
          break;
        case Assertion::kNotWordBoundary:
          facts.has_not_word_boundary = true;
          break;
        default:
          break;
      }
      return;
    }
    case Ast::Kind::kConcat: {
      Follow f = after;
      for (auto c = a.children.rbegin(); c != a.children.rend(); ++c) {
        analyze(*c, f, sum, facts);
        f = preceded_by(*c, f, sum);
      }
      return;
    }
    case Ast::Kind::kAlternate:
      for (const Ast& c : a.children) analyze(c, after, sum, facts);
      return;
    case Ast::Kind::kRepeat: {
      if (a.max == 0) return;
      Follow inside = after;
      if (a.max == kUnbounded || a.max > 1) inside.first |= sum.first(a.children.front());
      analyze(a.children.front(), inside, sum, facts);
      return;
    }
  }
}

// ---- Translation to RE2 syntax ---------------------------------------------------------------

// Every program runs in RE2's UTF-8 mode on the subject's bytes spelled as the runes
// U+0000..U+00FF (ASCII subjects are that already). RE2's Latin-1 mode would take the bytes as
// they are, but the RE2 Debian ships (2022-06) loses the Latin-1 flag when it factors common
// prefixes out of alternatives: "(?:\xe9a|\xe9b)" then never matches "\xe9a".
enum class Mode : std::uint8_t {
  kWhole,               // the subject as it is
  kBeforeFinalNewline,  // the subject without its final "\n": \z never holds there
  kMarkedFinalNewline,  // the final "\n" spelled U+0101, which RE2's ^ does not follow
};

// An atom that matches nothing.
constexpr std::string_view kNever = "[^\\x00-\\x{10ffff}]";
constexpr std::string_view kFinalNewlineMark = "\\x{101}";

class Translator {
 public:
  explicit Translator(Mode mode) : mode_(mode) {}

  // The RE2 pattern for `a`, or nullopt if it is longer than kRegexTranslationBytesMax.
  // `rune_aligned` makes the search start matches only between runes: RE2's own unanchored
  // search steps over bytes, and between the two bytes of a rune \B holds (no other assertion
  // does), so a pattern with \B could match there, at a place PCRE's subject does not have.
  std::optional<std::string> translate(const Ast& a, bool rune_aligned) {
    if (rune_aligned) out_ = "\\A(?s:.)*?(?:";
    emit(a, out_);
    if (rune_aligned) out_ += ')';
    if (overflow_ || out_.size() > kRegexTranslationBytesMax) return std::nullopt;
    return std::move(out_);
  }

 private:
  static void append_byte(std::string& out, int c) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x{";
    out += kHex[c >> 4];
    out += kHex[c & 15];
    out += '}';
  }

  static void append_ranges(std::string& out, const ByteSet& s) {
    for (int c = 0; c < 256;) {
      if (!s[static_cast<std::size_t>(c)]) {
        ++c;
        continue;
      }
      int hi = c;
      while (hi + 1 < 256 && s[static_cast<std::size_t>(hi + 1)]) ++hi;
      append_byte(out, c);
      if (hi > c) {
        out += '-';
        append_byte(out, hi);
      }
      c = hi + 1;
    }
  }

  // A byte set as one RE2 atom. In kMarkedFinalNewline mode the final newline's mark goes with
  // "\n": a set takes it if and only if it takes "\n".
  void emit_set(const ByteSet& s, std::string& out) const {
    const bool mark = mode_ == Mode::kMarkedFinalNewline && s['\n'];
    const std::size_t n = s.count();
    if (n == 0) {
      out += kNever;
    } else if (n == 1 && !mark) {
      for (int c = 0; c < 256; ++c) {
        if (s[static_cast<std::size_t>(c)]) append_byte(out, c);
      }
    } else if (n <= 128 || n == 256) {
      out += '[';
      append_ranges(out, s);
      if (mark) out += kFinalNewlineMark;
      out += ']';
    } else {  // the shorter spelling: everything but the complement (no rune above U+00FF
              // but the mark ever reaches a program)
      out += "[^";
      append_ranges(out, ~s);
      if (mode_ == Mode::kMarkedFinalNewline && !mark) out += kFinalNewlineMark;
      out += ']';
    }
  }

  void emit_assertion(Assertion a, std::string& out) const {
    switch (a) {
      case Assertion::kBeginText:
        out += "\\A";
        return;
      case Assertion::kBeginLine:
        out += "(?m:^)";
        return;
      case Assertion::kEndText:
        out += mode_ == Mode::kBeforeFinalNewline ? kNever : "\\z";
        return;
      case Assertion::kEndTextOrFinalNewline:
        out += "\\z";
        return;
      case Assertion::kEndLine:
        out += "(?m:$)";
        return;
      case Assertion::kWordBoundary:
        out += "\\b";
        return;
      case Assertion::kNotWordBoundary:
        out += "\\B";
        return;
    }
  }

  // Appends `a` so that the text can be concatenated with more: alternations are grouped.
  void emit(const Ast& a, std::string& out) {
    if (overflow_ || out.size() > kRegexTranslationBytesMax) return;
    switch (a.kind) {
      case Ast::Kind::kEmpty:
        return;
      case Ast::Kind::kBytes:
        emit_set(a.bytes, out);
        return;
      case Ast::Kind::kAssert:
        emit_assertion(a.assertion, out);
        return;
      case Ast::Kind::kConcat:
        for (const Ast& c : a.children) emit(c, out);
        return;
      case Ast::Kind::kAlternate:
        out += "(?:";
        for (std::size_t k = 0; k < a.children.size(); ++k) {
          if (k > 0) out += '|';
          emit(a.children[k], out);
        }
        out += ')';
        return;
      case Ast::Kind::kRepeat: {
        // X{m,n} matches the same strings as X^m (X?)^(n-m): spelled out, because RE2 caps
        // counted repetition at 1000 and PCRE allows 65535 (the size bound applies first).
        std::string body = "(?:";
        emit(a.children.front(), body);
        body += ')';
        // Every copy counts against one budget for the whole pattern: nested repetitions
        // multiply, and each level's text is held at once while the next one builds.
        auto copy = [&](char suffix) {
          expanded_ += body.size() + 1;
          if (expanded_ > kRegexTranslationBytesMax) {
            overflow_ = true;
            return false;
          }
          out += body;
          if (suffix) out += suffix;
          return true;
        };
        // X*, X+ and X? are RE2's own (spelling X+ as X X* would double the text at every
        // nesting level).
        if (a.max == kUnbounded && a.min <= 1) {
          copy(a.min == 0 ? '*' : '+');
          return;
        }
        if (a.min == 0 && a.max == 1) {
          copy('?');
          return;
        }
        for (int k = 0; k < a.min; ++k)
          if (!copy('\0')) return;
        if (a.max == kUnbounded) {
          copy('*');
          return;
        }
        for (int k = a.min; k < a.max; ++k)
          if (!copy('?')) return;
        return;
      }
    }
  }

  Mode mode_;
  std::string out_;
  std::size_t expanded_ = 0;  // bytes of repeated copies emitted, at every nesting level
  bool overflow_ = false;     // past kRegexTranslationBytesMax: the pattern is refused
};

CompileError too_large() {
  return CompileError{true, "patterns over " + std::to_string(kRegexProgramSizeMax) +
                                " instructions (large counted repetitions)"};
}

std::variant<std::unique_ptr<RE2>, CompileError> compile_re2(const Ast& ast, Mode mode,
                                                             bool rune_aligned) {
  std::optional<std::string> pattern = Translator(mode).translate(ast, rune_aligned);
  if (!pattern) return too_large();
  RE2::Options options;
  options.set_log_errors(false);
  options.set_never_capture(true);
  auto re = std::make_unique<RE2>(*pattern, options);
  if (re->error_code() == RE2::ErrorPatternTooLarge) return too_large();
  if (!re->ok()) return CompileError{true, "a pattern RE2 refuses (" + re->error() + ")"};
  return re;
}

// `subject` as the programs read it: bytes from 0x80 up as the runes U+0080..U+00FF in UTF-8,
// and with `mark`, the last byte (a "\n") as U+0101. Nullopt when that is `subject` itself.
std::optional<std::string> as_runes(std::string_view subject, bool mark) {
  const bool ascii = std::all_of(subject.begin(), subject.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii && !mark) return std::nullopt;
  std::string out;
  out.reserve(subject.size() * 2);
  const std::size_t end = mark ? subject.size() - 1 : subject.size();
  for (std::size_t k = 0; k < end; ++k) {
    const auto c = static_cast<unsigned char>(subject[k]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  if (mark) out += "\xC4\x81";
  return out;
}

bool partial_match(std::string_view subject, bool mark, const RE2& re) {
  const std::optional<std::string> runes = as_runes(subject, mark);
  return runes ? RE2::PartialMatch(*runes, re)
               : RE2::PartialMatch(re2::StringPiece(subject.data(), subject.size()), re);
}

}  // namespace

class Regex {
 public:
  std::unique_ptr<RE2> whole;
  std::unique_ptr<RE2> before_final_newline;  // null: `whole` serves
  std::unique_ptr<RE2> marked_final_newline;  // null: `whole` serves
  std::uint64_t program_size = 1;
};

std::variant<std::shared_ptr<const Regex>, CompileError> compile(std::string_view pattern) {
  auto parsed = parse(pattern);
  if (auto* e = std::get_if<CompileError>(&parsed)) return std::move(*e);
  const Ast* ast = &std::get<Ast>(parsed);
  if (program_size(*ast) + 1 > kRegexProgramSizeMax) return too_large();
  Facts facts;
  const Summaries sum(*ast);
  analyze(*ast, Follow{{}, true}, sum, facts);
  if (facts.end_text_then_newline) {
    return CompileError{true, "$ or \\Z followed by pattern that can match a newline"};
  }
  if (facts.begin_line_may_end && facts.end_line_then_newline) {
    return CompileError{true,
                        "(?m)^ that can end a match together with $ followed by pattern that "
                        "can match a newline"};
  }
  auto regex = std::make_shared<Regex>();
  auto build = [&](Mode mode, std::unique_ptr<RE2>* out) -> std::optional<CompileError> {
    auto re = compile_re2(*ast, mode, facts.has_not_word_boundary);
    if (auto* e = std::get_if<CompileError>(&re)) return std::move(*e);
    *out = std::move(std::get<std::unique_ptr<RE2>>(re));
    regex->program_size = std::max<std::uint64_t>(
        regex->program_size, static_cast<std::uint64_t>((*out)->ProgramSize()));
    return std::nullopt;
  };
  if (auto e = build(Mode::kWhole, &regex->whole)) return std::move(*e);
  if (facts.has_end_text) {
    if (auto e = build(Mode::kBeforeFinalNewline, &regex->before_final_newline)) {
      return std::move(*e);
    }
  }
  if (facts.begin_line_may_end) {
    if (auto e = build(Mode::kMarkedFinalNewline, &regex->marked_final_newline)) {
      return std::move(*e);
    }
  }
  return std::shared_ptr<const Regex>(std::move(regex));
}

bool search(const Regex& regex, std::string_view subject) {
  const std::uint64_t n = subject.size();
  if ((n + 1) > kRegexCostMax / regex.program_size) return false;
  if (subject.empty() || subject.back() != '\n') return partial_match(subject, false, *regex.whole);
  // Matches that end before the final newline, then those that end at the very end.
  const RE2& before = regex.before_final_newline ? *regex.before_final_newline : *regex.whole;
  if (partial_match(subject.substr(0, n - 1), false, before)) return true;
  if (!regex.marked_final_newline) return partial_match(subject, false, *regex.whole);
  return partial_match(subject, true, *regex.marked_final_newline);
}

}  // namespace chaise::core::mango_regex
