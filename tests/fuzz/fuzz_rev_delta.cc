// libFuzzer target: revision body deltas (core/rev/rev_delta.h). The input is two JSON texts
// separated by a NUL byte. Every delta make_body_delta returns must rebuild its target exactly;
// applying the second text as a delta to the first (a corrupt stored delta) must fail cleanly.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "core/rev/rev_delta.h"
#include "core/util/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using Json = nlohmann::ordered_json;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\0');
  if (split == std::string_view::npos) return 0;
  const std::string_view a = input.substr(0, split), b = input.substr(split + 1);
  auto base = chaise::core::parse_json_text(a, chaise::core::JsonNumbers::exact);
  auto other = chaise::core::parse_json_text(b, chaise::core::JsonNumbers::exact);
  auto* bj = std::get_if<Json>(&base);
  auto* oj = std::get_if<Json>(&other);
  if (!bj || !oj) return 0;
  // Stored bodies are what dump_json writes: diff those.
  const std::string base_text = chaise::core::dump_json(*bj, false);
  const std::string target_text = chaise::core::dump_json(*oj, false);
  if (auto delta = chaise::core::make_body_delta(base_text, target_text)) {
    auto d = chaise::core::parse_json_text(*delta, chaise::core::JsonNumbers::exact);
    if (!std::holds_alternative<Json>(d)) std::abort();
    Json rebuilt = *bj;
    if (!chaise::core::apply_body_delta(rebuilt, std::get<Json>(d))) std::abort();
    if (chaise::core::dump_json(rebuilt, false) != target_text) std::abort();
  }
  Json doc = *bj;
  (void)chaise::core::apply_body_delta(doc, *oj);
  return 0;
}
