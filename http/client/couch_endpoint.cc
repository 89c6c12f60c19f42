// http/client/couch_endpoint.cc — see couch_endpoint.h. Reference: CouchDB 3.5
// couch_replicator_api_wrap.erl (the requests a replication makes).
#include "http/client/couch_endpoint.h"

#include <variant>

#include "core/replication/spec.h"
#include "core/util/base64.h"
#include "core/util/json_text.h"
#include "http/client/session_auth.h"
#include "http/transport/request_parse.h"

namespace chaise::http::client {

using core::CouchError;
using core::Outcome;
using core::replication::Json;
namespace bhttp = boost::beast::http;

namespace {

// The error a CouchDB answer of `status` says in its body ({"error", "reason"}), or
// unknown_error when the body says nothing.
CouchError answer_error(unsigned status, std::string_view body) {
  CouchError e{static_cast<int>(status), "unknown_error", ""};
  auto parsed = core::parse_json_text(body, core::JsonNumbers::exact);
  if (Json* json = std::get_if<Json>(&parsed); json != nullptr && json->is_object()) {
    if (const auto it = json->find("error"); it != json->end() && it->is_string())
      e.error = it->get<std::string>();
    if (const auto it = json->find("reason"); it != json->end() && it->is_string())
      e.reason = it->get<std::string>();
  }
  return e;
}

// A query parameter's value: a string as it is, anything else as JSON, then percent-encoded.
std::string query_value(const Json& v) {
  return url_encode(v.is_string() ? v.get<std::string>() : core::dump_json(v, false));
}

}  // namespace

CouchEndpoint::CouchEndpoint(std::unique_ptr<Sender> sender, std::string db_path,
                             std::vector<std::pair<std::string, std::string>> headers,
                             std::string display)
    : sender_(std::move(sender)),
      db_path_(std::move(db_path)),
      headers_(std::move(headers)),
      display_(std::move(display)) {
  if (db_path_.empty() || db_path_.back() != '/') db_path_ += '/';
}

Outcome<std::unique_ptr<core::replication::Endpoint>> CouchEndpoint::from_json(
    const Json& endpoint, const ClientOptions& options, std::unique_ptr<Sender> sender) {
  std::string url_text;
  if (endpoint.is_string()) {
    url_text = endpoint.get<std::string>();
  } else if (endpoint.is_object() && endpoint.contains("url") && endpoint["url"].is_string()) {
    url_text = endpoint["url"].get<std::string>();
  } else {
    return core::err::bad_request("endpoint has an invalid url");
  }
  auto url = Url::parse(url_text);
  if (!url) return core::err::bad_request("endpoint has an invalid url");
  std::vector<std::pair<std::string, std::string>> headers = {{"Accept", "application/json"}};
  // The credentials, in normalize_basic_auth's order: "auth": {"basic"}, the URL's, an
  // Authorization: Basic header's.
  std::optional<std::pair<std::string, std::string>> basic =
      core::replication::basic_auth(endpoint);
  if (!basic && url->has_credentials) basic = {url->user, url->password};
  if (!basic) basic = core::replication::header_basic_auth(endpoint);
  if (endpoint.is_object()) {
    if (const auto h = endpoint.find("headers"); h != endpoint.end() && h->is_object()) {
      for (auto it = h->begin(); it != h->end(); ++it) {
        if (!it->is_string()) continue;
        // An empty value (the Authorization or Cookie of a request that had none) sends nothing.
        if (it->get_ref<const std::string&>().empty()) continue;
        std::string lower = it.key();
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "authorization" && basic) continue;
        headers.emplace_back(it.key(), it->get<std::string>());
      }
    }
  }
  std::string display = url->scheme + "://" + url->host_header() + url->path;
  if (!url->query.empty()) display += "?" + url->query;
  if (display.find('?') == std::string::npos && display.back() != '/') display += '/';
  if (sender) {
    // This server's own database, in process: the router checks the credentials of each
    // request without a password hash on the network, so there is no session to gain.
    if (basic) {
      headers.emplace_back("Authorization",
                           "Basic " + core::base64_encode(basic->first + ":" + basic->second));
    }
  } else if (basic) {
    sender = std::make_unique<SessionSender>(std::make_unique<RemoteSender>(*url, options),
                                             basic->first, basic->second);
  } else {
    sender = std::make_unique<RemoteSender>(*url, options);
  }
  return std::unique_ptr<core::replication::Endpoint>(
      new CouchEndpoint(std::move(sender), url->path, std::move(headers), std::move(display)));
}

Outcome<ClientResponse> CouchEndpoint::raw_call(
    bhttp::verb method, const std::string& target, std::string body,
    const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  auto headers = headers_;
  for (const auto& h : extra_headers) headers.push_back(h);
  auto r = sender_->send(method, target, headers, std::move(body));
  if (!r.ok()) {
    const ClientError& e = r.error();
    return CouchError{0, e.timed_out ? "timeout" : "network_error", e.message};
  }
  ClientResponse& res = r.value();
  if (res.status >= 200 && res.status < 300) return std::move(res);
  return answer_error(res.status, res.body);
}

Outcome<Json> CouchEndpoint::call(bhttp::verb method, const std::string& target, std::string body) {
  std::vector<std::pair<std::string, std::string>> extra;
  if (!body.empty() || method == bhttp::verb::post || method == bhttp::verb::put)
    extra.emplace_back("Content-Type", "application/json");
  auto r = raw_call(method, target, std::move(body), extra);
  if (auto* e = std::get_if<CouchError>(&r)) return *e;
  auto parsed = core::parse_json_text(std::get<ClientResponse>(r).body, core::JsonNumbers::exact);
  Json* json = std::get_if<Json>(&parsed);
  if (json == nullptr)
    return CouchError{0, "network_error", "the answer of " + display_ + " is not JSON"};
  return std::move(*json);
}

std::string CouchEndpoint::doc_path(std::string_view id) const {
  if (id.starts_with("_design/")) return db_path_ + "_design/" + url_encode(id.substr(8));
  if (id.starts_with("_local/")) return db_path_ + "_local/" + url_encode(id.substr(7));
  return db_path_ + url_encode(id);
}

Outcome<Json> CouchEndpoint::info() { return call(bhttp::verb::get, db_path_, {}); }

Outcome<Json> CouchEndpoint::create(const Json& params) {
  std::string target = db_path_;
  char sep = '?';
  if (params.is_object()) {
    for (auto it = params.begin(); it != params.end(); ++it) {
      target += sep + url_encode(it.key()) + "=" + query_value(it.value());
      sep = '&';
    }
  }
  return call(bhttp::verb::put, target, {});
}

Outcome<std::optional<Json>> CouchEndpoint::get_local(std::string_view id) {
  auto r = call(bhttp::verb::get, db_path_ + "_local/" + url_encode(id), {});
  if (auto* e = std::get_if<CouchError>(&r)) {
    if (e->status == 404) return std::optional<Json>();
    return *e;
  }
  return std::optional<Json>(std::move(std::get<Json>(r)));
}

Outcome<Json> CouchEndpoint::put_local(std::string_view id, const Json& doc) {
  return call(bhttp::verb::put, db_path_ + "_local/" + url_encode(id), core::dump_json(doc, false));
}

Outcome<Json> CouchEndpoint::get_doc(std::string_view id) {
  return call(bhttp::verb::get, doc_path(id), {});
}

Outcome<Json> CouchEndpoint::put_doc(std::string_view id, const Json& doc) {
  return call(bhttp::verb::put, doc_path(id), core::dump_json(doc, false));
}

Outcome<Json> CouchEndpoint::changes(const core::replication::ChangesQuery& q) {
  std::string target = db_path_ + "_changes?";
  bool post = false;
  Json body = Json::object();
  if (!q.filter.empty()) {
    target += "filter=" + url_encode(q.filter) + "&";
    if (q.filter == "_doc_ids" && q.doc_ids) {
      post = true;
      body["doc_ids"] = *q.doc_ids;
    } else if (q.filter == "_selector" && q.selector) {
      post = true;
      body["selector"] = *q.selector;
    }
    if (q.query_params.is_object()) {
      for (auto it = q.query_params.begin(); it != q.query_params.end(); ++it)
        target += url_encode(it.key()) + "=" + query_value(it.value()) + "&";
    }
  }
  target += "style=all_docs&since=" + query_value(q.since) + "&limit=" + std::to_string(q.limit);
  if (q.include_docs) target += "&include_docs=true";
  if (q.longpoll) target += "&feed=longpoll&timeout=" + std::to_string(q.timeout_ms);
  return call(post ? bhttp::verb::post : bhttp::verb::get, target,
              post ? core::dump_json(body, false) : std::string());
}

Outcome<Json> CouchEndpoint::revs_diff(const Json& id_revs) {
  return call(bhttp::verb::post, db_path_ + "_revs_diff", core::dump_json(id_revs, false));
}

Outcome<Json> CouchEndpoint::open_revs(const Json& entries) {
  // entries: the _bulk_get requests for one document.
  const std::string id = entries.front()["id"].get<std::string>();
  Json revs = Json::array();
  for (const Json& e : entries) revs.push_back(e["rev"]);
  const std::string target =
      doc_path(id) + "?revs=true&latest=true&open_revs=" + url_encode(core::dump_json(revs, false));
  auto r = call(bhttp::verb::get, target, {});
  if (auto* e = std::get_if<CouchError>(&r)) {
    if (e->status != 404) return *e;
    Json docs = Json::array();
    for (const Json& rev : revs) docs.push_back(Json{{"missing", rev}});
    return Json{{"id", id}, {"docs", docs}};
  }
  Json& answer = std::get<Json>(r);
  if (!answer.is_array()) return CouchError{0, "network_error", "open_revs answered no array"};
  return Json{{"id", id}, {"docs", std::move(answer)}};
}

Outcome<Json> CouchEndpoint::bulk_get(const Json& docs, bool use_bulk_get) {
  if (use_bulk_get && !bulk_get_missing_) {
    Json body = {{"docs", docs}};
    auto r = call(bhttp::verb::post, db_path_ + "_bulk_get?revs=true&latest=true",
                  core::dump_json(body, false));
    if (auto* e = std::get_if<CouchError>(&r)) {
      // A server without _bulk_get (CouchDB before 2.0) answers 404, 405 or 400 for it.
      if (e->status != 404 && e->status != 405 && e->status != 400) return *e;
      bulk_get_missing_ = true;
    } else {
      Json& answer = std::get<Json>(r);
      if (!answer.is_object() || !answer.contains("results") || !answer["results"].is_array())
        return CouchError{0, "network_error", "_bulk_get answered no results"};
      return std::move(answer["results"]);
    }
  }
  // One GET ?open_revs per document, its revisions together.
  Json results = Json::array();
  std::size_t i = 0;
  while (i < docs.size()) {
    Json group = Json::array({docs[i]});
    std::size_t j = i + 1;
    while (j < docs.size() && docs[j]["id"] == docs[i]["id"]) group.push_back(docs[j++]);
    auto r = open_revs(group);
    if (auto* e = std::get_if<CouchError>(&r)) return *e;
    results.push_back(std::move(std::get<Json>(r)));
    i = j;
  }
  return results;
}

Outcome<Json> CouchEndpoint::bulk_docs(const Json& docs) {
  Json body = {{"new_edits", false}, {"docs", docs}};
  return call(bhttp::verb::post, db_path_ + "_bulk_docs", core::dump_json(body, false));
}

Outcome<Json> CouchEndpoint::ensure_full_commit() {
  return call(bhttp::verb::post, db_path_ + "_ensure_full_commit", {});
}

bool CouchEndpoint::takes_encoded_multipart() {
  if (!encoded_multipart_) {
    // The server's welcome, at the path above the database's: CouchDB's (and Chaise's) say
    // "couchdb".
    std::string root = db_path_.substr(0, db_path_.size() - 1);
    root = root.substr(0, root.rfind('/') + 1);
    auto r = call(bhttp::verb::get, root.empty() ? "/" : root, {});
    const Json* welcome = std::get_if<Json>(&r);
    encoded_multipart_ = welcome != nullptr && welcome->is_object() && welcome->contains("couchdb");
  }
  return *encoded_multipart_;
}

namespace {

// The body of a streamed answer as the replicator reads it.
class ReaderBody : public core::replication::Endpoint::BodyReader {
 public:
  explicit ReaderBody(std::unique_ptr<ResponseReader> r)
      : r_(std::move(r)),
        content_type_(r_->headers()[bhttp::field::content_type].empty()
                          ? std::string("application/json")
                          : std::string(r_->headers()[bhttp::field::content_type])) {}
  const std::string& content_type() const override { return content_type_; }
  Outcome<std::size_t> read(std::string& out, std::size_t max) override {
    auto n = r_->read(out, max);
    if (!n.ok()) {
      return CouchError{0, n.error().timed_out ? "timeout" : "network_error", n.error().message};
    }
    return n.value();
  }

 private:
  std::unique_ptr<ResponseReader> r_;
  std::string content_type_;
};

// The error an answer's (small) body says, read whole.
CouchError error_of(ResponseReader& r) {
  std::string body;
  for (int i = 0; i < 64 && body.size() < (1u << 20); ++i) {
    auto n = r.read(body, 64 * 1024);
    if (!n.ok() || n.value() == 0) break;
  }
  return answer_error(r.status(), body);
}

}  // namespace

Outcome<std::unique_ptr<core::replication::Endpoint::BodyReader>>
CouchEndpoint::open_doc_with_attachments(std::string_view id, const Json& rev,
                                         const Json& atts_since, bool multipart) {
  std::string target = doc_path(id) + "?revs=true&attachments=true&rev=" + query_value(rev);
  if (atts_since.is_array() && !atts_since.empty())
    target += "&atts_since=" + url_encode(core::dump_json(atts_since, false));
  auto headers = headers_;
  headers.emplace_back("Accept",
                       multipart ? "multipart/related, application/json" : "application/json");
  auto r = sender_->open(bhttp::verb::get, target, headers);
  if (!r.ok()) {
    return CouchError{0, r.error().timed_out ? "timeout" : "network_error", r.error().message};
  }
  std::unique_ptr<ResponseReader>& reader = r.value();
  if (reader->status() < 200 || reader->status() >= 300) return error_of(*reader);
  return std::unique_ptr<BodyReader>(new ReaderBody(std::move(reader)));
}

Outcome<Json> CouchEndpoint::put_replicated(std::string_view id, BodyReader& body) {
  auto headers = headers_;
  headers.emplace_back("Content-Type", body.content_type());
  const std::string target = doc_path(id) + "?new_edits=false";
  // A body that ends within kWholeBodyBytes goes as one plain request (one write on the target);
  // a larger one streams, the part already read first.
  std::string head;
  bool complete = false;
  while (head.size() < kWholeBodyBytes) {
    auto n = body.read(head, kWholeBodyBytes - head.size());
    if (auto* e = std::get_if<CouchError>(&n)) return *e;
    if (std::get<std::size_t>(n) == 0) {
      complete = true;
      break;
    }
  }
  std::optional<CouchError> source_error;
  ClientResult<ClientResponse> r = ClientError{"not sent"};
  if (complete) {
    r = sender_->send(bhttp::verb::put, target, headers, std::move(head));
  } else {
    const BodyPull pull = [&](std::string& out, std::size_t max) -> std::optional<std::size_t> {
      if (!head.empty()) {
        const std::size_t n = head.size();
        out.append(head);
        head.clear();
        head.shrink_to_fit();
        return n;
      }
      auto n = body.read(out, max);
      if (auto* e = std::get_if<CouchError>(&n)) {
        source_error = *e;
        return std::nullopt;
      }
      return std::get<std::size_t>(n);
    };
    r = sender_->send_streamed(bhttp::verb::put, target, headers, pull);
  }
  if (source_error) return *source_error;
  if (!r.ok()) {
    return CouchError{0, r.error().timed_out ? "timeout" : "network_error", r.error().message};
  }
  ClientResponse& res = r.value();
  if (res.status < 200 || res.status >= 300) return answer_error(res.status, res.body);
  auto parsed = core::parse_json_text(res.body, core::JsonNumbers::exact);
  Json* json = std::get_if<Json>(&parsed);
  return json != nullptr ? std::move(*json) : Json();
}

}  // namespace chaise::http::client
