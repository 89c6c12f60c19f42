// http/api/bulk_get.cc — POST /{db}/_bulk_get: many documents, each by id and optionally
// revision, in one request (CouchDB's replicator and PouchDB fetch changed documents this way).
//
// Behaviour follows apache/couchdb src/chttpd/src/chttpd_db.erl (db_req _bulk_get,
// bulk_get_parse_arg, bulk_get_ret_json, bulk_get_ret_multipart): an entry without "rev" answers
// every leaf (fabric:open_revs all); per-entry errors are answered inside "results", in the
// request's order; the answer is JSON unless the client accepts only multipart. The answer is
// streamed, and documents are read in snapshot transactions of kEntriesPerTransaction entries.
#include <boost/beast/http/field.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/docs/documents.h"
#include "http/api/pages.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/transport/multipart.h"

namespace chaise::http {
namespace {

using beast_http::field;

constexpr std::size_t kEntriesPerTransaction = 100;

struct BulkGetOptions {
  bool revs = false, latest = false, attachments = false, att_encoding_info = false;
};

BulkGetOptions parse_query(const Call& call) {
  BulkGetOptions o;
  for (const auto& [key, value] : call.query.params()) {
    if (key == "open_revs" || key == "new_edits" || key == "w" || key == "rev" ||
        key == "atts_since")
      throw HttpError(err::bad_request("\"" + key + "\" query parameter is not acceptable"));
    const bool on = value == "true";
    if (key == "revs") o.revs = on;
    if (key == "latest") o.latest = on;
    if (key == "attachments") o.attachments = on;
    if (key == "att_encoding_info") o.att_encoding_info = on;
  }
  return o;
}

// One requested entry, checked as bulk_get_parse_arg does.
struct Entry {
  Json id;                         // the "id" as given (null if none)
  std::optional<core::RevId> rev;  // none: every leaf
  std::optional<std::vector<core::RevId>> atts_since;
  std::optional<core::CouchError> error;
  Json error_rev;  // the "rev" of an entry error
};

Entry parse_entry(const Json& doc) {
  Entry e;
  if (!doc.is_object() || doc.empty()) {
    e.error = err::bad_request("document must be a JSON object");
    return e;
  }
  auto id = doc.find("id");
  if (id == doc.end()) {
    e.error = err::bad_request("document id missed");
    return e;
  }
  e.id = *id;
  if (!id->is_string()) {
    e.error = err::illegal_docid("Document id must be a string");
    return e;
  }
  if (auto bad = core::validate_docid(id->get_ref<const std::string&>())) {
    e.error = std::move(*bad);
    return e;
  }
  if (auto rev = doc.find("rev"); rev != doc.end() && !rev->is_null()) {
    auto parsed =
        rev->is_string() ? core::RevId::parse(rev->get_ref<const std::string&>()) : std::nullopt;
    if (!parsed) {
      e.error = err::bad_request("Invalid rev format");
      e.error_rev = *rev;
      return e;
    }
    e.rev = std::move(*parsed);
  }
  if (auto since = doc.find("atts_since"); since != doc.end() && !since->is_null()) {
    if (!since->is_array()) {
      e.error = err::bad_request("att_since value must be array of revs.");
      e.error_rev = *since;
      return e;
    }
    std::vector<core::RevId> revs;
    for (const Json& r : *since) {
      auto parsed =
          r.is_string() ? core::RevId::parse(r.get_ref<const std::string&>()) : std::nullopt;
      if (!parsed) {
        e.error = err::bad_request("Invalid rev format");
        e.error_rev = r;
        return e;
      }
      revs.push_back(std::move(*parsed));
    }
    if (!revs.empty()) e.atts_since = std::move(revs);
  }
  return e;
}

// bulk_get_json_error_map, in the key order CouchDB 3.5 writes it.
std::string error_json(const Json& id, const Json& rev, const core::CouchError& e) {
  return "{\"rev\":" + rev.dump() + ",\"reason\":" + core::json_string(e.reason) +
         ",\"id\":" + id.dump() + ",\"error\":" + core::json_string(e.error) + "}";
}

// One entry's answer: documents found, and errors (missing revisions, entry errors).
struct Answer {
  struct Doc {
    std::string json;
    core::RenderedAtts atts;
    std::string rev;
  };
  std::vector<Doc> docs;
  std::vector<std::string> errors;  // serialized error objects
};

// `fields`: read_rule for the entry's document.
storage::Result<Answer> answer_entry(storage::Transaction& tr, const core::DbRef& db,
                                     const Entry& e, const BulkGetOptions& q, bool multipart,
                                     const ReadRule& fields) {
  Answer a;
  if (e.error) {
    a.errors.push_back(error_json(e.id, e.error_rev, *e.error));
    return a;
  }
  const std::string& id = e.id.get_ref<const std::string&>();
  auto all = core::read_branches(tr, db, id, storage::Snapshot::yes);
  if (!all.ok()) return all.error();
  std::optional<std::vector<core::RevId>> revs;
  if (e.rev) revs = std::vector<core::RevId>{*e.rev};
  auto sel = core::select_open_revs(*all, revs, q.latest);
  core::DocReadOptions o;
  fields.apply(o);
  o.revs = q.revs;
  o.attachments = q.attachments || multipart;
  o.att_encoding_info = q.att_encoding_info || multipart;
  o.att_follows = multipart;
  o.atts_since = e.atts_since;
  for (const core::StoredBranch* b : sel.found) {
    Answer::Doc d;
    auto json = core::branch_doc_json(tr, db, id, *all, *b, o, &d.atts);
    if (!json.ok()) return json.error();
    if (json->empty()) {  // nothing of it is public (CouchDB answers internal_fabric_error)
      a.errors.push_back(error_json(e.id, e.rev ? e.rev->str() : "undefined", err::not_found()));
      continue;
    }
    d.json = std::move(*json);
    d.rev = b->branch.leaf.str();
    a.docs.push_back(std::move(d));
  }
  for (const core::RevId& r : sel.missing)
    a.errors.push_back(error_json(e.id, r.str(), err::not_found()));
  if (sel.found.empty() && sel.missing.empty())  // open_revs all of a missing document
    a.errors.push_back(error_json(e.id, "undefined", err::not_found()));
  return a;
}

std::string json_result(const Entry& e, const Answer& a) {
  std::string out = "{\"id\":" + e.id.dump() + ",\"docs\":[";
  bool first = true;
  for (const auto& d : a.docs) {
    out += (first ? "" : ",") + std::string("{\"ok\":") + d.json + "}";
    first = false;
  }
  for (const auto& err : a.errors) {
    out += (first ? "" : ",") + std::string("{\"error\":") + err + "}";
    first = false;
  }
  return out + "]}";
}

// send_docs_multipart_bulk_get: a document with attachment bytes is a nested multipart/related
// part with X-Doc-Id and X-Rev-Id; one without is an application/json part; errors are
// application/json parts with error="true".
// The attachment bytes are planned, not read: they are streamed (write_body_plan).
BodyPlan multipart_result(const Entry& e, const Answer& a, std::string_view boundary) {
  BodyPlan out;
  for (const auto& d : a.docs) {
    out.text("\r\n--");
    out.text(boundary);
    if (d.atts.follows.empty()) {
      out.text("\r\nContent-Type: application/json\r\n\r\n" + d.json);
      continue;
    }
    const std::string inner = make_boundary();
    std::string text = "\r\nX-Doc-Id: " + e.id.get<std::string>() + "\r\nX-Rev-Id: " + d.rev +
                       "\r\nContent-Type: multipart/related; boundary=\"" + inner + "\"\r\n\r\n";
    append_part(text, inner, {{"Content-Type", "application/json"}}, d.json);
    for (const core::AttInfo& att : d.atts.follows) {
      // The part's delimiter and headers (append_part with an empty body, less its CRLF).
      append_part(
          text, inner,
          attachment_part_headers(att.name, att.content_type,
                                  static_cast<std::size_t>(att.encoded_length), att.encoding),
          "");
      text.resize(text.size() - 2);
      out.text(text);
      out.att(att);
      text = "\r\n";
    }
    append_close(text, inner);
    out.text(text);
  }
  for (const auto& err : a.errors) {
    out.text("\r\n--");
    out.text(boundary);
    out.text("\r\nContent-Type: application/json; error=\"true\"\r\n\r\n" + err);
  }
  return out;
}

}  // namespace

MaybeResponse handle_bulk_get(Call& call, const core::DbRef& db) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false);
  auto docs = body.find("docs");
  if (docs == body.end() || docs->is_null())
    throw HttpError(err::bad_request("Missing JSON list of 'docs'."));
  // CouchDB answers 500 function_clause for a "docs" that is not a list.
  if (!docs->is_array()) throw HttpError(err::bad_request("`docs` parameter must be an array."));
  const BulkGetOptions q = parse_query(call);
  const bool multipart = !accepts_media_type(call.req, "application/json") &&
                         (accepts_media_type(call.req, "multipart/mixed") ||
                          accepts_media_type(call.req, "multipart/related"));
  std::vector<Entry> entries;
  entries.reserve(docs->size());
  for (const Json& d : *docs) entries.push_back(parse_entry(d));

  Response head{Status::ok, call.req.version()};
  head.set(field::server, kServerHeader);
  head.set(field::date, http_date_now());
  head.set(field::cache_control, "must-revalidate");
  head.keep_alive(call.req.keep_alive());
  const std::string boundary = "--" + make_boundary();
  if (multipart) {
    const char* type =
        accepts_media_type(call.req, "multipart/mixed") ? "multipart/mixed" : "multipart/related";
    head.set(field::content_type, std::string(type) + "; boundary=\"" + boundary + "\"");
  } else {
    head.set(field::content_type, "application/json");
  }
  if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
  if (!multipart && !co_await call.stream.write("{\"results\":[")) co_return std::nullopt;
  EntryReads reads(call.store(), kEntriesPerTransaction);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    ReadRule fields;
    if (!entries[i].error) {
      try {
        fields = read_rule(call, db, entries[i].id.get_ref<const std::string&>());
      } catch (const HttpError& denied) {  // a design document of _users
        entries[i].error = denied.error();
        entries[i].error_rev = "undefined";
      }
    }
    auto a = reads.read(i, [&](storage::Transaction& tr) {
      return answer_entry(tr, db, entries[i], q, multipart, fields);
    });
    if (!a.ok()) co_return std::nullopt;  // the head is sent: all we can do is stop
    if (multipart) {
      if (!co_await write_body_plan(call, db, multipart_result(entries[i], *a, boundary)))
        co_return std::nullopt;
      continue;
    }
    if (!co_await call.stream.write((i ? "," : "") + json_result(entries[i], *a)))
      co_return std::nullopt;
  }
  if (multipart) {
    if (!entries.empty() && !co_await call.stream.write("\r\n--" + boundary + "--\r\n"))
      co_return std::nullopt;
  } else if (!co_await call.stream.write("]}\n")) {
    co_return std::nullopt;
  }
  co_await call.stream.finish();
  co_return std::nullopt;
}

}  // namespace chaise::http
