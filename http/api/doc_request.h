// http/api/doc_request.h — what a request to /{db}/{docid}, /{db}/_design/{name} or
// /{db}/_local/{name} says (its target, the revisions it names, chttpd_db:parse_doc_query's
// options) and the shape of a document answer, for the document and attachment endpoints.
// Every function throws HttpError with CouchDB's answer for what it cannot accept.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rev/rev.h"
#include "http/api/request.h"

namespace chaise::http {

inline constexpr std::string_view kLocalPrefix = "_local/";

// 400 bad_request "Invalid rev format".
[[noreturn]] void throw_invalid_rev();
// 501 not_implemented, CouchDB's chttpd:error_info(not_implemented).
[[noreturn]] void throw_not_implemented();

// `s` in double quotes (an ETag).
std::string dquote(std::string_view s);
// The value of header `f`, or nullopt when the request has none.
std::optional<std::string> header_value(const Request& req, beast_http::field f);
// The absolute URI of document `id` in the request's database (a Location header).
std::string doc_location(const Call& call, std::string_view id);

// ---- Revisions as CouchDB parses them

// couch_doc:parse_rev's acceptance, which is wider than RevId::parse: "N-rest" with N an Erlang
// integer (sign allowed), and rest 32 hex digits when it is 32 bytes long and N != 0. Returns the
// canonical text ("pos-hash", hex lowercased) used to compare two revisions of a _local document.
std::optional<std::string> couch_rev_text(std::string_view text);
// A document revision from the URL or a header: 400 "Invalid rev format" unless RevId::parse
// accepts it (a narrowing of CouchDB's parse_rev: revisions of documents never have pos 0).
core::RevId parse_rev_or_throw(std::string_view text);
// A _local document's revision as couch_rev_text reads it, or 400 "Invalid rev format".
std::string local_rev_or_throw(std::string_view text);
// The If-Match header as a revision (chttpd_db:extract_header_rev strips the quotes).
std::optional<std::string> if_match_text(const Request& req);

// chttpd_db:couch_doc_from_req + extract_header_rev: the revision an edit is based on, from the
// body, ?rev= and If-Match, which must agree.
template <typename Rev>
std::optional<Rev> merge_revs(std::optional<Rev> body, std::optional<Rev> query,
                              std::optional<Rev> if_match) {
  if (body) {
    if (query && *query != *body)
      throw HttpError(err::bad_request(
          "Document rev from request body and query string have different values"));
    if (if_match && *if_match != *body)
      throw HttpError(err::bad_request("Document rev and etag have different values"));
    return body;
  }
  if (query && if_match && *query != *if_match)
    throw HttpError(err::bad_request("Document rev and etag have different values"));
  return query ? query : if_match;
}

// ---- The request's target

struct Target {
  std::string id;
  bool local = false;
  std::vector<std::string> rest;  // path segments after the document (an attachment name)
};
// chttpd_db:db_req's dispatch of /{db}/... to a document.
Target resolve_target(const Call& call);

// ---- Query parameters (chttpd_db:parse_doc_query)

struct DocQuery {
  std::optional<std::string> rev_text;  // the last ?rev=, format-checked
  bool open_revs_all = false;
  std::optional<std::vector<std::string>> open_revs;  // non-empty list
  bool revs = false, revs_info = false, conflicts = false, deleted_conflicts = false;
  bool local_seq = false, latest = false, deleted = false;
  bool new_edits = true;
  bool attachments = false, att_encoding_info = false;
  std::optional<std::vector<std::string>> atts_since;
};
// Parameters are applied in order, as CouchDB's foldl does; only the exact value "true" turns an
// option on, anything else is ignored (not an error), and unknown parameters are ignored.
DocQuery parse_doc_query(const Call& call);

// ---- Answers

// A document's 304, with Cache-Control as every document answer has.
Response not_modified(const Request& req, std::string_view etag);
// A document answer with its ETag, or 304 when the client has it (chttpd:etag_respond).
Response doc_response(const Request& req, std::string body, const std::optional<std::string>& etag);
// {"ok":true,"id":...,"rev":...} with ETag (and Location when given).
Response update_response(const Call& call, Status status, std::string_view id, std::string_view rev,
                         std::string_view etag, std::string_view location = {});
// couch_httpd:make_etag for _local documents: an opaque hash of the revision and body, in quotes
// and base 36 like CouchDB's (which hashes the Erlang term; clients only compare it).
std::string local_etag(std::string_view doc_json);

}  // namespace chaise::http
