#include "core/docs/design_doc.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

namespace chaise::core {

namespace {

using Json = nlohmann::ordered_json;

enum class Type { string, array, object, boolean };
// Listed in the order CouchDB's reasons print them ("string or object").
using Types = std::vector<Type>;

bool has_type(const Json& v, Type t) {
  switch (t) {
    case Type::string:
      return v.is_string();
    case Type::array:
      return v.is_array();
    case Type::object:
      return v.is_object();
    case Type::boolean:
      return v.is_boolean();
  }
  return false;
}

bool has_any_type(const Json& v, const Types& types) {
  return std::any_of(types.begin(), types.end(), [&](Type t) { return has_type(v, t); });
}

std::string type_names(const Types& types) {
  static constexpr std::array<const char*, 4> kNames = {"string", "array", "object", "boolean"};
  std::string out;
  for (Type t : types) {
    if (!out.empty()) out += " or ";
    out += kNames[static_cast<std::size_t>(t)];
  }
  return out;
}

CouchError wrong_type(const std::string& path, const Types& types) {
  return err::invalid_design_doc("`" + path + "` field must have " + type_names(types) + " type");
}

// Member `key` of `obj`, if present, must have one of `types`. `path` names it in the reason.
std::optional<CouchError> check_member(const Json& obj, const std::string& key,
                                       const std::string& path, const Types& types) {
  const auto it = obj.find(key);
  if (it == obj.end() || has_any_type(*it, types)) return std::nullopt;
  return wrong_type(path, types);
}

// Top-level member `key`, if present, must be an object whose members all have one of `types`
// (filters, lists, shows, updates).
std::optional<CouchError> check_function_table(const Json& doc, const std::string& key,
                                               const Types& types) {
  if (auto e = check_member(doc, key, key, {Type::object})) return e;
  const auto it = doc.find(key);
  if (it == doc.end()) return std::nullopt;
  for (const auto& [name, value] : it->items())
    if (!has_any_type(value, types)) return wrong_type(key + "." + name, types);
  return std::nullopt;
}

// For every member of `views`: it must be an object, and its `field`, if present, one of `types`.
std::optional<CouchError> check_view_field(const Json& views, const std::string& field,
                                           const Types& types) {
  for (const auto& [name, view] : views.items()) {
    if (!view.is_object()) return wrong_type("views." + name, {Type::object});
    if (auto e = check_member(view, field, "views." + name + "." + field, types)) return e;
  }
  return std::nullopt;
}

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

// CouchDB only compiles views (and so only checks built-in reduce names) for a language it has a
// query server for; its default servers are JavaScript (two engines) and Mango's "query".
bool has_query_server(std::string_view language) {
  const std::string l = upper(language);
  return l == "JAVASCRIPT" || l == "QUERY" || l == "JAVASCRIPT_QUICKJS" ||
         l == "JAVASCRIPT_SPIDERMONKEY";
}

// The N of _top_N / _bottom_N: an Erlang integer (optional sign, digits) in 1..kRankMax.
std::optional<CouchError> check_rank(std::string_view n) {
  constexpr std::int64_t kRankMax = 100;  // couch_mrview ?MAX_RANK
  std::string_view digits = n;
  bool negative = false;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
    negative = digits.front() == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                     [](unsigned char c) { return std::isdigit(c) != 0; }))
    return err::invalid_design_doc("invalid rank reducer");
  const std::size_t first = std::min(digits.find_first_not_of('0'), digits.size());
  digits.remove_prefix(first);
  const bool in_range = !negative && !digits.empty() && digits.size() <= 3 &&
                        std::stoll(std::string(digits)) <= kRankMax;
  if (!in_range)
    return err::invalid_design_doc("rank value must be between 1 and " + std::to_string(kRankMax));
  return std::nullopt;
}

// couch_mrview:validate's list of built-in reduce functions (matched as prefixes, as CouchDB does).
std::optional<CouchError> check_builtin_reduce(std::string_view reduce) {
  static constexpr std::array<std::string_view, 6> kPrefixes = {
      "_sum", "_count", "_stats", "_approx_count_distinct", "_first", "_last"};
  for (std::string_view p : kPrefixes)
    if (reduce.starts_with(p)) return std::nullopt;
  if (reduce.starts_with("_top_")) return check_rank(reduce.substr(5));
  if (reduce.starts_with("_bottom_")) return check_rank(reduce.substr(8));
  return err::invalid_design_doc("`" + std::string(reduce) +
                                 "` is not a supported reduce function.");
}

std::optional<CouchError> check_views(const Json& doc, Partitioned db_partitioned) {
  const auto language_it = doc.find("language");
  const std::string language =
      language_it == doc.end() ? "javascript" : language_it->get<std::string>();
  const auto views_it = doc.find("views");
  const Json empty = Json::object();
  const Json& views = views_it == doc.end() ? empty : *views_it;

  if (auto e = check_member(doc, "views", "views", {Type::object})) return e;
  if (auto e = check_member(views, "lib", "views.lib", {Type::object})) return e;
  const Types map_type = {language == "query" ? Type::object : Type::string};
  if (auto e = check_view_field(views, "map", map_type)) return e;
  if (auto e = check_view_field(views, "reduce", {Type::string})) return e;
  for (const auto& [name, view] : views.items())
    if (name != "lib" && !view.contains("map"))
      return err::invalid_design_doc("View `" + name + "` must contain map function");
  for (const auto& [name, view] : views.items())
    if (view.contains("map"))
      if (auto e = check_member(view, "options", "views." + name + ".options", {Type::object}))
        return e;

  const auto options = doc.find("options");
  if (options != doc.end()) {
    const auto p = options->find("partitioned");
    if (p != options->end() && *p == true && db_partitioned == Partitioned::no)
      return err::invalid_design_doc(
          "partitioned option cannot be true in a non-partitioned database.");
  }

  if (!has_query_server(language)) return std::nullopt;  // CouchDB stores unknown languages as-is
  for (const auto& [name, view] : views.items()) {
    if (!view.contains("map")) continue;
    const auto reduce = view.find("reduce");
    if (reduce == view.end()) continue;
    const std::string& source = reduce->get_ref<const std::string&>();
    if (!source.starts_with("_")) continue;  // JavaScript: Chaise cannot compile it
    if (auto e = check_builtin_reduce(source)) return e;
  }
  return std::nullopt;
}

}  // namespace

std::optional<CouchError> validate_design_doc(std::string_view id, const Json& doc,
                                              Partitioned db_partitioned) {
  if (!id.starts_with("_design/") || !doc.is_object()) return std::nullopt;
  const Types function_types = {Type::string, Type::object};
  if (auto e = check_function_table(doc, "filters", function_types)) return e;
  if (auto e = check_member(doc, "language", "language", {Type::string})) return e;
  if (auto e = check_function_table(doc, "lists", function_types)) return e;
  if (auto e = check_member(doc, "options", "options", {Type::object})) return e;
  if (const auto options = doc.find("options"); options != doc.end()) {
    for (const char* key : {"include_design", "local_seq", "partitioned"})
      if (auto e = check_member(*options, key, std::string("options.") + key, {Type::boolean}))
        return e;
  }
  if (auto e = check_member(doc, "rewrites", "rewrites", {Type::array, Type::string})) return e;
  if (auto e = check_function_table(doc, "shows", function_types)) return e;
  if (auto e = check_function_table(doc, "updates", function_types)) return e;
  if (auto e = check_member(doc, "validate_doc_update", "validate_doc_update", {Type::string}))
    return e;
  return check_views(doc, db_partitioned);
}

}  // namespace chaise::core
