// libFuzzer target: client JSON text (core/json_text) and documents built from it
// (core/doc_json parse_doc: _id, _rev, _revisions, _deleted, _attachments and the stored body).
// Checks, beyond "no crash": parse_json_text answers what nlohmann's lexer answers; a parsed value
// prints as JSON that parses again to the same text; a document's stored body is itself JSON that
// parses and prints back unchanged, and its revision hash is the same from the parsed values
// (ParsedDoc::body_term) as from the stored text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "core/docs/doc_json.h"
#include "core/rev/couch_rev.h"
#include "core/util/json_text.h"

using chaise::core::JsonNumbers;
using nlohmann::ordered_json;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// dump_json(parse(text)) is a fixed point after one round.
void round_trip(const ordered_json& value, JsonNumbers numbers) {
  std::string first;
  try {
    first = chaise::core::dump_json(value);
  } catch (const nlohmann::json::exception&) {
    return;  // a string with invalid UTF-8 (the strict dump refuses it; parse accepted it)
  }
  auto again = chaise::core::parse_json_text(first, numbers);
  require(std::holds_alternative<ordered_json>(again));
  require(chaise::core::dump_json(std::get<ordered_json>(again)) == first);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (JsonNumbers numbers : {JsonNumbers::doubles, JsonNumbers::exact}) {
    auto parsed = chaise::core::parse_json_text(text, numbers);
    // Its own reader answers what nlohmann's lexer answers.
    auto by_nlohmann = chaise::core::detail::parse_json_text_with_nlohmann(text, numbers);
    require(parsed.index() == by_nlohmann.index());
    if (parsed.index() == 1) require(std::get<1>(parsed) == std::get<1>(by_nlohmann));
    if (parsed.index() == 0) {
      require(std::get<0>(parsed) == std::get<0>(by_nlohmann));
      try {
        require(chaise::core::dump_json(std::get<0>(parsed)) ==
                chaise::core::dump_json(std::get<0>(by_nlohmann)));
      } catch (const nlohmann::json::exception&) {
      }
    }
    if (auto* reason = std::get_if<std::string>(&parsed)) {
      require(reason->rfind("invalid UTF-8 JSON", 0) == 0);
      continue;
    }
    const ordered_json& value = std::get<ordered_json>(parsed);
    round_trip(value, numbers);
    if (numbers != JsonNumbers::exact || !value.is_object()) continue;
    auto doc = chaise::core::parse_doc(value, /*with_body_term=*/true);
    if (auto* d = std::get_if<chaise::core::ParsedDoc>(&doc)) {
      auto body = chaise::core::parse_json_text(d->body, JsonNumbers::exact);
      require(std::holds_alternative<ordered_json>(body));
      require(std::get<ordered_json>(body).is_object());
      require(chaise::core::dump_json(std::get<ordered_json>(body)) == d->body);
      // The revision hash from the parsed values is the hash of the stored text.
      require(chaise::core::couch_rev_hash_of_term(false, std::nullopt, d->body_term, {}) ==
              chaise::core::couch_rev_hash(false, std::nullopt, d->body, {}));
    }
  }
  return 0;
}
