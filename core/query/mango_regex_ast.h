// core/query/mango_regex_ast.h — inside $regex (room-internal): the PCRE syntax as an AST of byte
// sets, assertions, concatenation, alternation and repetition. mango_regex_parse.cc parses a
// pattern into it; mango_regex.cc analyses it and translates it to RE2.
#pragma once

#include <bitset>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "core/query/mango_regex.h"

namespace chaise::core::mango_regex {

using ByteSet = std::bitset<256>;

enum class Assertion : std::uint8_t {
  kBeginText,              // \A, \G, ^
  kBeginLine,              // ^ under (?m): also after a \n that is not the last byte
  kEndText,                // \z
  kEndTextOrFinalNewline,  // \Z, $: at the end or before a final \n
  kEndLine,                // $ under (?m): also before any \n
  kWordBoundary,           // \b
  kNotWordBoundary,        // \B
};

constexpr int kUnbounded = -1;
constexpr int kQuantifierMax = 65535;  // PCRE's limit for {n,m}

struct Ast {
  enum class Kind : std::uint8_t { kEmpty, kBytes, kConcat, kAlternate, kRepeat, kAssert };
  Kind kind = Kind::kEmpty;
  Assertion assertion = Assertion::kBeginText;
  int min = 0;
  int max = 0;  // or kUnbounded
  ByteSet bytes;
  std::vector<Ast> children;
};

// The AST of `pattern`, or why PCRE would refuse it (or this translation cannot keep its meaning).
std::variant<Ast, CompileError> parse(std::string_view pattern);

}  // namespace chaise::core::mango_regex
