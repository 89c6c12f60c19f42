// libFuzzer target: revision strings (RevId::parse) and _revisions objects
// (parse_revisions_or_reason). A parsed rev prints back to a string that parses to it again.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "core/rev/rev.h"
#include "core/util/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto rev = chaise::core::RevId::parse(text)) {
    auto again = chaise::core::RevId::parse(rev->str());
    if (!again || *again != *rev) std::abort();
  }
  auto parsed = chaise::core::parse_json_text(text, chaise::core::JsonNumbers::exact);
  if (auto* value = std::get_if<nlohmann::ordered_json>(&parsed)) {
    (void)chaise::core::parse_revisions_or_reason(*value);
  }
  return 0;
}
