// libFuzzer target: JSON Patch / JSON Merge Patch (core/json_patch), as PATCH /{db}/{docid}
// applies them. The input is "document\npatch": any patch must either be refused with a
// CouchError or give an object whose JSON text parses back to the same value.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "core/docs/json_patch.h"
#include "core/util/json_text.h"

using nlohmann::ordered_json;

namespace {

void check(const chaise::core::PatchResult& r) {
  if (const auto* doc = std::get_if<ordered_json>(&r)) {
    if (!doc->is_object()) std::abort();
    const std::string text = chaise::core::dump_json(*doc, false);
    auto again = chaise::core::parse_json_text(text, chaise::core::JsonNumbers::exact);
    const auto* back = std::get_if<ordered_json>(&again);
    if (back == nullptr || chaise::core::dump_json(*back, false) != text) std::abort();
  } else {
    const int status = std::get<chaise::core::CouchError>(r).status;
    if (status != 400 && status != 409 && status != 422) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\n');
  if (split == std::string_view::npos) return 0;
  auto doc =
      chaise::core::parse_json_text(input.substr(0, split), chaise::core::JsonNumbers::exact);
  auto patch =
      chaise::core::parse_json_text(input.substr(split + 1), chaise::core::JsonNumbers::exact);
  auto* d = std::get_if<ordered_json>(&doc);
  auto* p = std::get_if<ordered_json>(&patch);
  if (d == nullptr || p == nullptr || !d->is_object()) return 0;
  check(chaise::core::merge_patch(*d, *p));
  if (!chaise::core::check_json_patch(*p)) check(chaise::core::json_patch(*d, *p));
  return 0;
}
