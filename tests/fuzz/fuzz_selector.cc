// libFuzzer target: Mango selectors (core/selector), parsed from JSON and matched against a few
// documents, including one taken from the input itself. The input is "selector\ndocument"; a
// selector that parses must match without crashing or running away (regexes are bounded).
#include <cstdint>
#include <string_view>
#include <variant>

#include "core/query/selector.h"
#include "core/util/json_text.h"

using nlohmann::ordered_json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\n');
  const std::string_view selector_text = input.substr(0, split);
  auto parsed = chaise::core::parse_json_text(selector_text, chaise::core::JsonNumbers::doubles);
  auto* selector_json = std::get_if<ordered_json>(&parsed);
  if (selector_json == nullptr) return 0;
  auto selector = chaise::core::Selector::parse(*selector_json);
  auto* s = std::get_if<chaise::core::Selector>(&selector);
  if (s == nullptr) return 0;
  static const ordered_json kDocs[] = {
      ordered_json::parse(R"({"_id":"a","a":1,"b":"text","c":[1,2,{"d":null}],"e":{"f":true}})"),
      ordered_json::parse(R"({"_id":"b","a":[],"b":{},"c":"x\u00e9y","n":-1.5e3})"),
      ordered_json::object()};
  for (const ordered_json& doc : kDocs) (void)s->matches(doc);
  if (split != std::string_view::npos) {
    auto doc =
        chaise::core::parse_json_text(input.substr(split + 1), chaise::core::JsonNumbers::doubles);
    if (auto* d = std::get_if<ordered_json>(&doc); d != nullptr && d->is_object())
      (void)s->matches(*d);
  }
  return 0;
}
