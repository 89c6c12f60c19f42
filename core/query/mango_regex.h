// core/query/mango_regex.h — the $regex operator of Mango selectors: CouchDB's PCRE syntax, run by RE2.
//
// CouchDB runs re:run(Value, Pattern, [{capture, none}]): PCRE, an unanchored search over bytes
// (no unicode option), newline = LF. Chaise parses that PCRE syntax itself (so invalid patterns
// get CouchDB's error and PCRE's meaning is kept: ASCII-only case folding, "." is one byte,
// PCRE's character types and POSIX classes), then hands RE2 (Debian's libre2) an equivalent
// pattern in which every character class is spelled out byte by byte. RE2 matches in time
// linear in the subject and never recurses on it.
//
// PCRE and RE2 differ on three assertions when the subject ends with "\n": PCRE's `$` and `\Z`
// also hold before that final newline, and its multiline `^` does not hold after it. RE2 has
// neither rule and no lookahead to build them from, so search() splits the question: matches
// that end before the final newline are found on the subject without it (where `$` is RE2's end
// of text and `\z` never holds); matches that end at the very end are found on the whole subject
// (or, when a multiline `^` could fire there, on a copy whose final newline is a character that
// RE2's `^` does not treat as a line end). That is exact for every pattern except the ones
// compile() refuses as "not supported by Chaise" below.
//
// Contract
// - compile() never throws except std::bad_alloc. It refuses a pattern with CompileError:
//   `unsupported == false` for what PCRE refuses too (CouchDB answers "Bad argument"), true for
//   valid PCRE that Chaise does not run, with `what` naming the feature: backreferences,
//   lookaround, atomic groups, possessive quantifiers, conditionals, recursion, callouts, verbs,
//   \p{..}, \R, \X, \K, \N, \C, unknown letter escapes (PCRE 8 reads \y as "y", PCRE2 refuses
//   it), a quantifier on an assertion or on a quantifier, `$`/`\Z` followed by more pattern that
//   could consume the final newline (as in "a$\n"), a multiline `^` that may match at the very
//   end together with a `$` followed by such pattern, and patterns larger than
//   kRegexProgramSizeMax instructions.
// - search() is an unanchored search; it never throws except std::bad_alloc. A subject whose
//   length times the RE2 program size exceeds kRegexCostMax is answered "no match" without
//   running (Erlang's re answers nomatch past PCRE's match_limit too, at other points). A Regex
//   is immutable and may be searched from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace chaise::core {

// Nesting of groups in a $regex pattern (PCRE's default parenthesis nesting limit is 250).
inline constexpr int kRegexNestingMax = 250;
// Size of one $regex in Thompson-NFA instructions ("a{1000}" is 1000); larger ones are refused.
inline constexpr std::size_t kRegexProgramSizeMax = 20'000;
// Bytes of the RE2 pattern a $regex is translated to; larger translations are refused.
inline constexpr std::size_t kRegexTranslationBytesMax = 1 << 20;
// Subject bytes x RE2 program instructions one search may cost; past it the answer is no match.
// RE2's NFA, when a pattern defeats its DFA, takes about 12 ns per unit here: 0.6 s at most.
inline constexpr std::uint64_t kRegexCostMax = 50'000'000;

namespace mango_regex {

struct CompileError {
  bool unsupported = false;  // valid PCRE that Chaise does not run
  std::string what;          // PCRE's complaint, or the feature Chaise lacks
};

class Regex;

std::variant<std::shared_ptr<const Regex>, CompileError> compile(std::string_view pattern);

bool search(const Regex& regex, std::string_view subject);

}  // namespace mango_regex
}  // namespace chaise::core
