// core/docs/doc_json.cc — document body parsing (CouchDB couch_doc:transfer_fields) and splicing.
//
// Stored body format: the compact nlohmann serialization of the document object minus its
// extracted and dropped "_" members, keys in received order, e.g. {"a":1,"_access":["u"]}.
// Reads splice _id/_rev (and other meta members) in front of it without parsing it again.
#include "core/docs/doc_json.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>
#include <utility>

#include "core/rev/couch_rev.h"
#include "core/util/json_text.h"

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

// Members CouchDB accepts and then forgets (they are outputs of a read, not inputs).
constexpr std::array<std::string_view, 4> kDroppedMembers = {"_revs_info", "_local_seq",
                                                             "_conflicts", "_deleted_conflicts"};

// Members CouchDB keeps in the body: per-document access control (future) and the replicator's
// state in _replicator documents.
constexpr std::array<std::string_view, 6> kBodyMembers = {
    "_access",         "_replication_state", "_replication_state_time", "_replication_state_reason",
    "_replication_id", "_replication_stats"};

template <std::size_t N>
bool is_one_of(std::string_view key, const std::array<std::string_view, N>& names) {
  for (std::string_view n : names) {
    if (key == n) return true;
  }
  return false;
}

CouchError bad_special_member(std::string_view key) {
  return err::doc_validation("Bad special document member: " + std::string(key));
}

std::string dump(const Json& j, Json::error_handler_t handler) {
  return dump_json(j, handler == Json::error_handler_t::strict);
}

// Appends "key":value to `body` (compact, with a separating comma when needed) through `w`, a
// strict writer into `body`. Throws nlohmann::json::type_error on invalid UTF-8.
// `term`, when there is one, receives the member too.
void append_member(std::string& body, JsonWriter& w, CouchBodyTerm* term, const std::string& key,
                   const Json& value) {
  if (body.size() > 1) body.push_back(',');
  w.string(key);
  body.push_back(':');
  w.value(value);
  if (term != nullptr) term->member(key, value);
}

// Handles one "_"-prefixed member; returns an error or nullopt. `body` receives kept members.
std::optional<CouchError> transfer_special(const std::string& key, const Json& value,
                                           ParsedDoc& doc, std::string& body, JsonWriter& w,
                                           CouchBodyTerm* term) {
  if (key == "_id") {
    if (!value.is_string()) return err::illegal_docid("Document id must be a string");
    const auto& id = value.get_ref<const std::string&>();
    if (auto err = validate_docid(id)) return err;
    doc.id = id;
  } else if (key == "_rev") {
    if (doc.revisions) return std::nullopt;  // _revisions came first and wins (CouchDB)
    std::optional<RevId> rev;
    if (value.is_string()) rev = RevId::parse(value.get_ref<const std::string&>());
    if (!rev) return err::bad_request("Invalid rev format");
    doc.rev = std::move(rev);
  } else if (key == "_revisions" && value.is_object()) {
    auto parsed = parse_revisions_or_reason(value);
    if (auto* reason = std::get_if<std::string>(&parsed)) {
      return err::doc_validation(std::move(*reason));
    }
    doc.revisions = std::move(std::get<Branch>(parsed));
    doc.rev = doc.revisions->leaf;
  } else if (key == "_deleted" && value.is_boolean()) {
    doc.deleted = value.get<bool>();
  } else if (key == "_attachments" && value.is_object()) {
    doc.attachments = value;
  } else if (is_one_of(key, kDroppedMembers)) {
    // dropped
  } else if (is_one_of(key, kBodyMembers)) {
    append_member(body, w, term, key, value);
  } else {
    return bad_special_member(key);
  }
  return std::nullopt;
}

}  // namespace

std::variant<ParsedDoc, CouchError> parse_doc(const Json& doc, bool with_body_term) {
  if (!doc.is_object()) return err::bad_request("Document must be a JSON object");
  ParsedDoc parsed;
  std::string body = "{";
  JsonWriter w(body, /*strict=*/true);
  std::optional<CouchBodyTerm> term;
  if (with_body_term) term.emplace();
  CouchBodyTerm* const t = term ? &*term : nullptr;
  try {
    for (const auto& [key, value] : doc.items()) {
      if (!key.empty() && key[0] == '_') {
        if (auto err = transfer_special(key, value, parsed, body, w, t)) return std::move(*err);
      } else {
        append_member(body, w, t, key, value);
      }
    }
  } catch (const nlohmann::json::type_error&) {
    // Only reachable for values built in code: the parser never yields invalid UTF-8.
    return err::bad_request("invalid UTF-8 JSON");
  }
  body.push_back('}');
  parsed.body = std::move(body);
  if (term) parsed.body_term = term->finish();
  if (parsed.revisions) parsed.revisions->deleted = parsed.deleted;
  return parsed;
}

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (C0, C1) or beyond U+10FFFF (F5..FF)
    }
    if (s.size() - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const std::uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::optional<CouchError> validate_docid(std::string_view id) {
  if (id.empty()) return err::illegal_docid("Document id must not be empty");
  if (id == "_design/") return err::illegal_docid("Illegal document id `_design/`");
  if (id == "_local/") return err::illegal_docid("Illegal document id `_local/`");
  if (!is_valid_utf8(id)) {
    return err::illegal_docid("Document id must be valid UTF-8");
  }
  if (id[0] == '_' && !id.starts_with("_design/") && !id.starts_with("_local/")) {
    return err::illegal_docid("Only reserved document ids may start with underscore.");
  }
  return std::nullopt;
}

std::string json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_string(out, s);
  return out;
}

void append_json_string(std::string& out, std::string_view s) {
  // Ids, revisions and sequences are nearly always printable ASCII without quotes or
  // backslashes, which JSON takes as they are; anything else goes through the serializer
  // (escapes, and U+FFFD for invalid UTF-8). Building a Json per string took a tenth of a
  // _changes scan.
  if (!is_plain_json_string(s)) {
    out += dump(Json(std::string(s)), Json::error_handler_t::replace);
    return;
  }
  out.push_back('"');
  out.append(s);
  out.push_back('"');
}

void append_json_rev(std::string& out, const RevId& rev) {
  if (rev.hash.size() != kRevHashBytes) {  // a hash kept verbatim may need escapes
    append_json_string(out, rev.str());
    return;
  }
  out.push_back('"');
  rev.append_str(out);  // digits, '-' and hex
  out.push_back('"');
}

std::string splice_doc(std::string_view body, std::string_view id, std::string_view rev,
                       const std::vector<std::string>& extra_members) {
  assert(body.size() >= 2 && body.front() == '{' && body.back() == '}');
  // Members of the body, without its braces; empty for "{}" (and for "{ }", tolerated).
  std::string_view members = body.substr(1, body.size() - 2);
  while (!members.empty() && (members.front() == ' ' || members.front() == '\t' ||
                              members.front() == '\n' || members.front() == '\r')) {
    members.remove_prefix(1);
  }
  std::size_t size = 20 + id.size() + rev.size() + body.size();
  for (const std::string& m : extra_members) size += m.size() + 1;

  std::string out;
  out.reserve(size);
  out += "{\"_id\":";
  append_json_string(out, id);
  out += ",\"_rev\":";
  append_json_string(out, rev);
  for (const std::string& m : extra_members) {
    out.push_back(',');
    out += m;
  }
  if (!members.empty()) {
    out.push_back(',');
    out += members;
  }
  out.push_back('}');
  return out;
}

}  // namespace chaise::core
