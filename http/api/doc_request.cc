// http/api/doc_request.cc — what a document request says and the shape of its answers
// (doc_request.h).
#include "http/api/doc_request.h"

#include <cstdint>
#include <string>
#include <utility>

#include "core/util/ascii.h"
#include "core/util/json_text.h"
#include "http/api/etag.h"

namespace chaise::http {

using beast_http::field;

void throw_invalid_rev() { throw HttpError(err::bad_request("Invalid rev format")); }

void throw_not_implemented() {
  // CouchDB's chttpd:error_info(not_implemented).
  throw HttpError(err::not_implemented());
}

std::string dquote(std::string_view s) {
  std::string out = "\"";
  out.append(s);
  out.push_back('"');
  return out;
}

std::optional<std::string> header_value(const Request& req, field f) {
  auto it = req.find(f);
  if (it == req.end()) return std::nullopt;
  return std::string(it->value());
}

std::string doc_location(const Call& call, std::string_view id) {
  return absolute_uri(call, "/" + url_encode(call.path.at(0)) + "/" + url_encode(id));
}

std::optional<std::string> couch_rev_text(std::string_view text) {
  const std::size_t dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::string_view pos = text.substr(0, dash);
  std::string_view hash = text.substr(dash + 1);
  bool negative = false;
  if (!pos.empty() && (pos.front() == '+' || pos.front() == '-')) {
    negative = pos.front() == '-';
    pos.remove_prefix(1);
  }
  if (pos.empty() || pos.size() > 18) return std::nullopt;
  std::int64_t n = 0;
  for (char c : pos) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (negative) n = -n;
  std::string h(hash);
  if (n != 0 && h.size() == 32) {
    for (char c : h)
      if (hex_digit(c) < 0) return std::nullopt;
    h = core::ascii_lower(h);
  }
  return std::to_string(n) + "-" + h;
}

core::RevId parse_rev_or_throw(std::string_view text) {
  auto rev = core::RevId::parse(text);
  if (!rev) throw_invalid_rev();
  return std::move(*rev);
}

std::string local_rev_or_throw(std::string_view text) {
  auto rev = couch_rev_text(text);
  if (!rev) throw_invalid_rev();
  return std::move(*rev);
}

std::optional<std::string> if_match_text(const Request& req) {
  auto value = header_value(req, field::if_match);
  if (!value) return std::nullopt;
  std::string_view v = *value;
  while (!v.empty() && v.front() == '"') v.remove_prefix(1);
  while (!v.empty() && v.back() == '"') v.remove_suffix(1);
  return std::string(v);
}

Target resolve_target(const Call& call) {
  const auto& p = call.path;
  Target t;
  if (p.at(1) == "_local") {
    if (p.size() == 2) throw HttpError(err::bad_request("Invalid _local document id."));
    if (p.size() > 3)
      throw HttpError(err::bad_request("_local documents do not accept attachments."));
    t.id = std::string(kLocalPrefix) + p[2];
  } else if (p[1] == "_design" && p.size() > 2) {
    t.id = "_design/" + p[2];
    t.rest.assign(p.begin() + 3, p.end());
  } else {
    t.id = p[1];
    t.rest.assign(p.begin() + 2, p.end());
  }
  t.local = t.id.starts_with(kLocalPrefix);
  return t;
}

namespace {

// ?open_revs= and ?atts_since=: a JSON list of revisions.
std::vector<std::string> parse_rev_list(const std::string& json_text) {
  const Json j = parse_json_or_throw(json_text);
  if (!j.is_array()) throw HttpError(err::bad_request("Invalid list of revisions"));
  std::vector<std::string> out;
  for (const Json& r : j) {
    if (!r.is_string() || !couch_rev_text(r.get_ref<const std::string&>())) throw_invalid_rev();
    out.push_back(r.get<std::string>());
  }
  return out;
}

}  // namespace

DocQuery parse_doc_query(const Call& call) {
  DocQuery q;
  for (const auto& [key, value] : call.query.params()) {
    const bool on = value == "true";
    if (key == "meta" && on) {
      q.revs_info = q.conflicts = q.deleted_conflicts = true;
    } else if (key == "revs" && on) {
      q.revs = true;
    } else if (key == "revs_info" && on) {
      q.revs_info = true;
    } else if (key == "conflicts" && on) {
      q.conflicts = true;
    } else if (key == "deleted_conflicts" && on) {
      q.deleted_conflicts = true;
    } else if (key == "local_seq" && on) {
      q.local_seq = true;
    } else if (key == "latest" && on) {
      q.latest = true;
    } else if (key == "deleted" && on) {
      q.deleted = true;
    } else if (key == "rev") {
      if (!couch_rev_text(value)) throw_invalid_rev();
      q.rev_text = value;
    } else if (key == "open_revs") {
      q.open_revs_all = value == "all";
      q.open_revs.reset();
      if (!q.open_revs_all) {
        auto revs = parse_rev_list(value);
        if (!revs.empty()) q.open_revs = std::move(revs);  // [] means "no open_revs" in CouchDB
      }
    } else if (key == "atts_since") {
      q.atts_since = parse_rev_list(value);
      q.attachments = true;  // chttpd_db: atts_since implies attachments
    } else if (key == "attachments" && on) {
      q.attachments = true;
    } else if (key == "att_encoding_info" && on) {
      q.att_encoding_info = true;
    } else if (key == "new_edits" && (value == "true" || value == "false")) {
      q.new_edits = on;
    }
  }
  return q;
}

// A document's 304 also carries Cache-Control, as every document answer does.
Response not_modified(const Request& req, std::string_view etag) {
  Response r = not_modified_response(req, etag);
  r.set(field::cache_control, "must-revalidate");
  return r;
}

Response doc_response(const Request& req, std::string body,
                      const std::optional<std::string>& etag) {
  if (etag && if_none_match_has(req, *etag)) return not_modified(req, *etag);
  Response r = raw_json_response(req, Status::ok, std::move(body));
  if (etag) r.set(field::etag, *etag);
  return r;
}

Response update_response(const Call& call, Status status, std::string_view id, std::string_view rev,
                         std::string_view etag, std::string_view location) {
  // Written directly, not built as a Json and dumped: it was 5% of a PUT's instructions.
  std::string body = "{\"ok\":true,\"id\":";
  core::JsonWriter w(body, false);  // as json_response: invalid UTF-8 replaced, not thrown
  w.string(id);
  body.append(",\"rev\":");
  w.string(rev);
  body.push_back('}');
  Response r = raw_json_response(call.req, status, std::move(body));
  r.set(field::etag, etag);
  if (!location.empty()) r.set(field::location, location);
  return r;
}

std::string local_etag(std::string_view doc_json) {
  auto fnv = [&](std::uint64_t h) {
    for (char c : doc_json) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ULL;
    }
    return h;
  };
  auto base36 = [](std::uint64_t v) {
    static constexpr char kDigits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    std::string s;
    do {
      s.insert(s.begin(), kDigits[v % 36]);
      v /= 36;
    } while (v != 0);
    return s;
  };
  return dquote(base36(fnv(0xcbf29ce484222325ULL)) + base36(fnv(0x84222325cbf29ce4ULL)));
}

}  // namespace chaise::http
