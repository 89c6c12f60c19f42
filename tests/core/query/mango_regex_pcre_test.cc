// Differential test of core/mango_regex against PCRE itself (Debian's libpcre2-8, the library
// family behind Erlang's re): random patterns over the constructs whose meaning PCRE and RE2
// disagree on (end-of-subject assertions, multiline, \b/\B, bytes from 0x80 up, case folding,
// repetition of empty groups), random subjects over a small alphabet that includes "\n" and
// non-ASCII bytes. Every pattern Chaise accepts must answer exactly as PCRE does.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/query/mango_regex.h"

namespace chaise::core {
namespace {

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      out += "\\x" + std::to_string(static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

TEST(MangoRegexVsPcre, RandomPatternsAnswerAsPcreDoes) {
  const std::vector<std::string> tokens = {
      "a",   "b",   "\\n",   ".",      "[ab]",   "[^a]",  "\\s", "^",      "$",           "\\z",
      "\\Z", "\\A", "\\b",   "\\B",    "(?m)",   "(?s)",  "(",   ")",      "(?:",         "|",
      "*",   "+",   "?",     "{0,2}",  "{2}",    "x",     "\\S", "[\\n ]", "(?i)",        "A",
      "\\w", "\\W", "\\xe9", "[^\\n]", "(?m:^)", "(?-m)", ")*",  "*?",     "\\xe9|\\xe9a"};
  const char alphabet[] = {'a', 'b', '\n', ' ', 'A', '\xE9', '\xC9'};
  std::mt19937 rng(20261124);
  long compared = 0;
  int mismatches = 0;
  for (int it = 0; it < 80'000; ++it) {
    std::string pattern;
    const int length = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < length; ++k) pattern += tokens[rng() % tokens.size()];
    int error = 0;
    PCRE2_SIZE offset = 0;
    std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> code(
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &error,
                      &offset, nullptr),
        pcre2_code_free);
    auto ours = mango_regex::compile(pattern);
    if (!code) {
      EXPECT_TRUE(std::holds_alternative<mango_regex::CompileError>(ours))
          << "PCRE refuses /" << printable(pattern) << "/, Chaise accepts it";
      continue;
    }
    if (std::holds_alternative<mango_regex::CompileError>(ours)) continue;  // refused: tested
    const mango_regex::Regex& regex = *std::get<std::shared_ptr<const mango_regex::Regex>>(ours);
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
        pcre2_match_data_create_from_pattern(code.get(), nullptr), pcre2_match_data_free);
    for (int k = 0; k < 20; ++k) {
      std::string subject;
      const int n = static_cast<int>(rng() % 7);
      for (int j = 0; j < n; ++j) subject += alphabet[rng() % sizeof alphabet];
      const bool pcre = pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                                    subject.size(), 0, 0, data.get(), nullptr) >= 0;
      const bool chaise = mango_regex::search(regex, subject);
      ++compared;
      if (pcre != chaise && ++mismatches <= 20) {
        ADD_FAILURE() << "/" << printable(pattern) << "/ on \"" << printable(subject) << "\": PCRE "
                      << pcre << ", Chaise " << chaise;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(compared, 500'000);
}

}  // namespace
}  // namespace chaise::core
