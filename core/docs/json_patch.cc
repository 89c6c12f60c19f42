#include "core/docs/json_patch.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/util/json_text.h"

namespace chaise::core {

using Json = nlohmann::ordered_json;

namespace {

CouchError unprocessable(std::string reason) {
  return err::unprocessable_entity(std::move(reason));
}
CouchError not_an_object() { return err::bad_request("Document must be a JSON object"); }

// RFC 6901: "" is the whole document; otherwise "/"-separated tokens with ~1 = "/", ~0 = "~".
std::optional<std::vector<std::string>> parse_pointer(const std::string& p) {
  std::vector<std::string> tokens;
  if (p.empty()) return tokens;
  if (p[0] != '/') return std::nullopt;
  std::string cur;
  for (std::size_t i = 1; i <= p.size(); ++i) {
    if (i == p.size() || p[i] == '/') {
      tokens.push_back(std::move(cur));
      cur.clear();
    } else if (p[i] == '~') {
      if (i + 1 >= p.size() || (p[i + 1] != '0' && p[i + 1] != '1')) return std::nullopt;
      cur += p[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      cur += p[i];
    }
  }
  return tokens;
}

// An array index token: digits without a leading zero.
std::optional<std::size_t> array_index(const std::string& t) {
  if (t.empty() || t.size() > 9 || (t.size() > 1 && t[0] == '0')) return std::nullopt;
  std::size_t n = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::size_t>(c - '0');
  }
  return n;
}

// The value at `tokens` (nullptr when it does not exist).
Json* find(Json& doc, const std::vector<std::string>& tokens, std::size_t count) {
  Json* cur = &doc;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string& t = tokens[i];
    if (cur->is_object()) {
      auto it = cur->find(t);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      auto n = array_index(t);
      if (!n || *n >= cur->size()) return nullptr;
      cur = &(*cur)[*n];
    } else {
      return nullptr;
    }
  }
  return cur;
}

std::string pointer_of(const Json& op, const char* member) { return op[member].get<std::string>(); }

std::optional<CouchError> add_at(Json& doc, const std::vector<std::string>& tokens, Json value,
                                 const std::string& path) {
  if (tokens.empty()) {
    doc = std::move(value);
    return std::nullopt;
  }
  Json* parent = find(doc, tokens, tokens.size() - 1);
  const std::string& last = tokens.back();
  if (parent != nullptr && parent->is_object()) {
    (*parent)[last] = std::move(value);
    return std::nullopt;
  }
  if (parent != nullptr && parent->is_array()) {
    if (last == "-") {
      parent->push_back(std::move(value));
      return std::nullopt;
    }
    auto n = array_index(last);
    if (n && *n <= parent->size()) {
      parent->insert(parent->begin() + static_cast<std::ptrdiff_t>(*n), std::move(value));
      return std::nullopt;
    }
  }
  return unprocessable("JSON Patch path does not exist: " + path);
}

std::optional<CouchError> remove_at(Json& doc, const std::vector<std::string>& tokens,
                                    const std::string& path, Json* removed = nullptr) {
  Json* parent = tokens.empty() ? nullptr : find(doc, tokens, tokens.size() - 1);
  if (parent != nullptr && parent->is_object()) {
    auto it = parent->find(tokens.back());
    if (it != parent->end()) {
      if (removed) *removed = std::move(*it);
      parent->erase(it);
      return std::nullopt;
    }
  } else if (parent != nullptr && parent->is_array()) {
    auto n = array_index(tokens.back());
    if (n && *n < parent->size()) {
      if (removed) *removed = std::move((*parent)[*n]);
      parent->erase(*n);
      return std::nullopt;
    }
  }
  return unprocessable("JSON Patch path does not exist: " + path);
}

// a + b for two numbers: integers while the sum fits in 64 bits, else a double.
Json add_numbers(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) {
    auto wide = [](const Json& j) -> __int128 {
      return j.is_number_unsigned() ? static_cast<__int128>(j.get<std::uint64_t>())
                                    : static_cast<__int128>(j.get<std::int64_t>());
    };
    const __int128 sum = wide(a) + wide(b);
    if (sum >= INT64_MIN && sum <= INT64_MAX) return Json(static_cast<std::int64_t>(sum));
    if (sum > 0 && sum <= static_cast<__int128>(UINT64_MAX))
      return Json(static_cast<std::uint64_t>(sum));
  }
  return Json(a.get<double>() + b.get<double>());
}

bool is_plain_number(const Json& j) { return j.is_number() && !is_number_text(j); }

}  // namespace

PatchResult merge_patch(Json doc, const Json& patch) {
  if (!patch.is_object()) return not_an_object();
  // nlohmann's merge_patch is RFC 7396's algorithm.
  doc.merge_patch(patch);
  if (!doc.is_object()) return not_an_object();
  return doc;
}

std::optional<CouchError> check_json_patch(const Json& ops) {
  if (!ops.is_array()) return err::bad_request("A JSON Patch must be an array of operations");
  for (const Json& op : ops) {
    if (!op.is_object() || !op.contains("op") || !op["op"].is_string())
      return err::bad_request("Each JSON Patch operation must be an object with an \"op\"");
    const std::string& name = op["op"].get_ref<const std::string&>();
    static constexpr std::string_view kOps[] = {"add",  "remove", "replace",  "move",
                                                "copy", "test",   "increment"};
    bool known = false;
    for (std::string_view k : kOps) known |= name == k;
    if (!known) return err::bad_request("Unknown JSON Patch operation: " + name);
    if (!op.contains("path") || !op["path"].is_string() ||
        !parse_pointer(op["path"].get<std::string>()))
      return err::bad_request("JSON Patch operation \"" + name +
                              "\" needs a \"path\" JSON Pointer");
    if ((name == "move" || name == "copy") && (!op.contains("from") || !op["from"].is_string() ||
                                               !parse_pointer(op["from"].get<std::string>())))
      return err::bad_request("JSON Patch operation \"" + name +
                              "\" needs a \"from\" JSON Pointer");
    if ((name == "add" || name == "replace" || name == "test") && !op.contains("value"))
      return err::bad_request("JSON Patch operation \"" + name + "\" needs a \"value\"");
    if (name == "increment" && op.contains("value") && !is_plain_number(op["value"]))
      return err::bad_request("JSON Patch operation \"increment\" needs a number \"value\"");
    if (name == "move") {
      const std::string from = op["from"].get<std::string>(), path = op["path"].get<std::string>();
      if (path.size() > from.size() && path.compare(0, from.size(), from) == 0 &&
          path[from.size()] == '/')
        return err::bad_request("JSON Patch cannot move a value into itself");
    }
  }
  return std::nullopt;
}

PatchResult json_patch(Json doc, const Json& ops) {
  if (auto e = check_json_patch(ops)) return *e;
  for (const Json& op : ops) {
    const std::string& name = op["op"].get_ref<const std::string&>();
    const std::string path = pointer_of(op, "path");
    const auto tokens = *parse_pointer(path);
    std::optional<CouchError> e;
    if (name == "add") {
      e = add_at(doc, tokens, op["value"], path);
    } else if (name == "remove") {
      if (tokens.empty()) return not_an_object();
      e = remove_at(doc, tokens, path);
    } else if (name == "replace") {
      Json* target = find(doc, tokens, tokens.size());
      if (target == nullptr) return unprocessable("JSON Patch path does not exist: " + path);
      *target = op["value"];
    } else if (name == "move" || name == "copy") {
      const std::string from = pointer_of(op, "from");
      const auto from_tokens = *parse_pointer(from);
      Json value;
      if (name == "move") {
        if (from == path) continue;
        if (from_tokens.empty()) return not_an_object();
        e = remove_at(doc, from_tokens, from, &value);
      } else {
        Json* source = find(doc, from_tokens, from_tokens.size());
        if (source == nullptr) return unprocessable("JSON Patch path does not exist: " + from);
        value = *source;
      }
      if (!e) e = add_at(doc, tokens, std::move(value), path);
    } else if (name == "test") {
      Json* target = find(doc, tokens, tokens.size());
      if (target == nullptr || *target != op["value"])
        return err::conflict("JSON Patch test failed at " + path);
    } else {  // increment
      const Json by = op.contains("value") ? op["value"] : Json(1);
      Json* target = tokens.empty() ? nullptr : find(doc, tokens, tokens.size());
      if (target != nullptr) {
        if (!is_plain_number(*target))
          return unprocessable("JSON Patch cannot increment what is not a number: " + path);
        *target = add_numbers(*target, by);
      } else {
        e = add_at(doc, tokens, by, path);
      }
    }
    if (e) return *e;
  }
  if (!doc.is_object()) return not_an_object();
  return doc;
}

}  // namespace chaise::core
