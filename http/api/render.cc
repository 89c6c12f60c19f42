// /{db}/_design/{ddoc}/_show/{name}[/{docid}] and /{db}/_design/{ddoc}/_list/{name}/[{ddoc2}/]{view}:
// CouchDB's show and list functions (chttpd_show, couch_mrview_show), deprecated in CouchDB 3
// and still served by it.
//
// A show function renders one document (or none) into a response object, answered as
// chttpd_external answers it, with an ETag of what it depends on (the design document, the
// document, Accept and the user's roles).
//
// A list function renders a view's (or _all_docs') rows as it pulls them with getRow(), on a
// JavaScript context held for as long as it runs. The rows go to it a page at a time, and its
// output comes back in pieces of at most kFlushBytes: a ListPump between the request's coroutine
// (which reads pages and writes the response, never blocking its thread) and the engine's thread
// (which blocks in getRow() or send() until the coroutine has answered), so memory stays flat
// whatever the number of rows and a client that stops reading stops the function.
#include "http/api/render.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "core/docs/documents.h"
#include "core/index/filters.h"
#include "http/api/etag.h"
#include "http/api/js_request.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/wakeup.h"
#include "http/transport/response_stream.h"

namespace chaise::http {

namespace {

// The design document's function `kind`.`name`, or CouchDB's 404 for a missing JSON key.
void require_function(const Json& ddoc, const char* kind, const std::string& name) {
  const auto it = ddoc.find(kind);
  if (it == ddoc.end() || !it->is_object())
    throw HttpError(err::not_found(std::string("missing json key: ") + kind));
  if (!it->contains(name)) throw HttpError(err::not_found("missing json key: " + name));
}

// The path segments from `from` on, joined by "/": a document id that holds slashes.
std::string joined(const std::vector<std::string>& parts, std::size_t from) {
  std::string id;
  for (std::size_t i = from; i < parts.size(); ++i) {
    if (i > from) id += '/';
    id += parts[i];
  }
  return id;
}

MaybeResponse show(Call& call, const core::DbRef& db, const std::string& ddoc,
                   const std::vector<std::string>& rest) {
  // rest: "_show", name[, docid segments...]
  if (rest.size() < 2) throw HttpError(core::CouchError{404, "show_error", "Invalid path."});
  core::js::Engine& engine = js_engine(call);
  const std::string& name = rest[1];
  std::shared_ptr<const LoadedDesignDoc> loaded;
  std::optional<std::string> doc_id;
  std::string doc = "null";
  std::string doc_rev;
  {
    auto tr = call.store().create_transaction();
    loaded = design_doc(tr, db, ddoc);
    require_function(loaded->body, "shows", name);
    if (rest.size() > 2) {
      doc_id = joined(rest, 2);
      core::DocReadOptions o;
      o.revs = true;
      o.conflicts = true;
      read_rule(call, db, *doc_id).apply(o);
      auto read = value_or_throw(core::get_doc_json(tr, db, *doc_id, o));
      if (auto* text = std::get_if<std::string>(&read); text && !text->empty()) {
        doc = std::move(*text);
        const Json parsed = Json::parse(doc, nullptr, false);
        if (parsed.is_object() && parsed.contains("_rev") && parsed["_rev"].is_string())
          doc_rev = parsed["_rev"].get<std::string>();
      }
    }
  }
  EtagBuilder etag_parts;
  etag_parts.add(loaded->js.key).add(doc_id ? doc_rev : "nil");
  etag_parts.add(call.req[beast_http::field::accept]);
  for (const std::string& role : call.user.roles) etag_parts.add(role);
  const std::string etag = etag_parts.str();
  if (if_none_match_has(call.req, etag)) co_return not_modified_response(call.req, etag);

  const std::string req = js_request_object(call, doc_id).dump();
  auto r = engine.show(loaded->js, name, doc, req);
  if (auto* e = std::get_if<core::js::JsError>(&r)) throw HttpError(core::js_error(*e));
  ExternalResponse answer =
      parse_external_response(Json::parse(std::get<std::string>(r), nullptr, false));
  std::erase_if(answer.headers, [](const auto& h) {
    return boost::beast::iequals(h.first, "ETag") || boost::beast::iequals(h.first, "Vary");
  });
  answer.headers.emplace_back("ETag", etag);
  answer.headers.emplace_back("Vary", "Accept");
  co_return external_response(call, std::move(answer));
}

// How long the engine's thread waits for the request's coroutine (a page of rows read, a piece
// of output written) before it stops the list function.
constexpr std::chrono::seconds kHandoffTimeout{60};

// The handoff between a list function (the engine's thread) and its request (a coroutine).
struct ListPump final : core::js::ListIo {
  // Guarded by mu:
  std::mutex mu;
  std::condition_variable cv;    // the engine's thread waits here
  std::function<void()> resume;  // the coroutine waits here (async_wait_ready)
  std::string resp;              // the newest start() response object not yet taken
  std::string out;               // output not yet taken
  bool want_rows = false;        // the function waits for a row
  std::deque<std::string> rows;  // rows given, not yet read
  bool rows_end = false;         // no rows after `rows`
  bool gone = false;             // the request stopped: stop the function
  std::optional<core::js::JsResult<bool>> result;  // set when the function ended

  bool ready() const {
    return want_rows || out.size() >= ResponseStream::kFlushBytes || result.has_value();
  }
  void wake(std::unique_lock<std::mutex>& lock) {
    std::function<void()> go = std::move(resume);
    resume = nullptr;
    lock.unlock();
    if (go) go();
    lock.lock();
  }

  std::optional<std::string> next_row() override {
    std::unique_lock lock(mu);
    if (rows.empty() && !rows_end) {
      want_rows = true;
      wake(lock);
      if (!cv.wait_for(lock, kHandoffTimeout, [&] { return !rows.empty() || rows_end || gone; }))
        gone = true;
    }
    if (gone) throw std::runtime_error("the list's request stopped");
    if (rows.empty()) return std::nullopt;
    std::string row = std::move(rows.front());
    rows.pop_front();
    return row;
  }

  bool output(std::string_view r, std::string_view data) override {
    std::unique_lock lock(mu);
    if (gone) return false;
    if (!r.empty()) resp = r;
    out += data;
    if (out.size() >= ResponseStream::kFlushBytes) {
      wake(lock);
      if (!cv.wait_for(lock, kHandoffTimeout, [&] { return out.empty() || gone; })) gone = true;
    }
    return !gone;
  }

  void finished(core::js::JsResult<bool> r) override {
    std::unique_lock lock(mu);
    result = std::move(r);
    wake(lock);
  }

  void stop() {
    std::lock_guard lock(mu);
    gone = true;
    cv.notify_all();
  }
};

// What a list's response starts with (couch_mrview_show:fixup_headers): the start() response
// object's code and headers, "application/json" unless it names a type.
ExternalResponse list_head(const std::string& resp) {
  Json j = Json::parse(resp, nullptr, false);
  ExternalResponse r = parse_external_response(j.is_object() ? j : Json::object());
  r.json = false;
  r.body.clear();
  return r;
}

// The error a list function ended with, once its answer has begun: CouchDB's chunked error.
std::string chunked_error(const core::CouchError& e) {
  return "\n" + Json{{"code", e.status}, {"error", e.error}, {"reason", e.reason}}.dump() + "\n";
}

MaybeResponse list(Call& call, const core::DbRef& db, const std::string& ddoc,
                   const std::vector<std::string>& rest) {
  // rest: "_list", name, view  |  "_list", name, ddoc2, view
  const bool post = call.is(beast_http::verb::post);
  if (!post && !is_get(call)) throw_method_not_allowed("GET,POST,HEAD");
  if (rest.size() != 3 && rest.size() != 4)
    throw HttpError(core::CouchError{404, "list_error", "Invalid path."});
  core::js::Engine& engine = js_engine(call);
  std::optional<Json> body;
  if (post) body = parse_json_object_body(call.req);
  const std::string& name = rest[1];
  std::shared_ptr<const LoadedDesignDoc> loaded;
  {
    auto tr = call.store().create_transaction();
    loaded = design_doc(tr, db, ddoc);
  }
  require_function(loaded->body, "lists", name);
  const std::string& view_name = rest.back();
  const Json* query_body = body ? &*body : nullptr;
  // (Statements, not a conditional expression: GCC 12 miscompiles co_await inside one.)
  std::unique_ptr<ListRows> source;
  if (view_name == "_all_docs" && rest.size() == 3) {
    source = all_docs_list_rows(call, db, query_body);
  } else {
    const std::string& view_ddoc = rest.size() == 4 ? rest[2] : ddoc;
    source = co_await view_list_rows(call, db, view_ddoc, view_name, query_body);
  }

  auto pump = std::make_shared<ListPump>();
  engine.list(loaded->js, name, source->head(), js_request_object(call, std::nullopt).dump(), pump);

  std::optional<ExternalResponse> head;  // from the newest start(), until the answer begins
  std::optional<core::CouchError> failure;
  const auto begin = [&]() -> boost::asio::awaitable<bool> {
    Response h = external_head(call, head ? *head : list_head("{}"));
    h.chunked(true);
    co_return co_await call.stream.begin(std::move(h));
  };
  bool client_gone = false;
  std::vector<std::string> page;
  for (;;) {
    co_await async_wait_ready(pump, boost::asio::use_awaitable);
    std::string resp, out;
    bool want_rows = false;
    std::optional<core::js::JsResult<bool>> result;
    {
      std::lock_guard lock(pump->mu);
      resp = std::move(pump->resp);
      pump->resp.clear();
      out = std::move(pump->out);
      pump->out.clear();
      want_rows = pump->want_rows;
      pump->want_rows = false;
      result = pump->result;
      pump->cv.notify_all();
    }
    if (!resp.empty() && !call.stream.begun()) head = list_head(resp);
    // (One co_await per statement: GCC 12 miscompiles one on the right of &&.)
    if (!out.empty() && !client_gone) {
      bool sent = true;
      if (!call.stream.begun()) sent = co_await begin();
      if (sent) sent = co_await call.stream.write(out);
      if (!sent) {
        client_gone = true;
        pump->stop();
      }
    }
    if (result) {
      if (client_gone) co_return std::nullopt;
      if (auto* e = std::get_if<core::js::JsError>(&*result); e && !failure)
        failure = core::js_error(*e);
      break;
    }
    if (want_rows) {
      page.clear();
      bool more = false;
      try {
        more = source->next_page(page, failure);
      } catch (...) {
        pump->stop();
        throw;
      }
      std::lock_guard lock(pump->mu);
      for (std::string& row : page) pump->rows.push_back(std::move(row));
      pump->rows_end = !more;
      if (failure) pump->gone = true;  // the rows failed: the function stops, the error is told
      pump->cv.notify_all();
    }
  }
  if (failure) {
    if (!call.stream.begun()) {
      if (!head) throw HttpError(*failure);
      head->code = failure->status;
      const bool begun = co_await begin();
      if (!begun) co_return std::nullopt;
    }
    co_await call.stream.write(chunked_error(*failure));
    co_await call.stream.finish();
    co_return std::nullopt;
  }
  // A list that sent nothing at all answers an empty 200, as CouchDB's last_chunk does.
  if (!call.stream.begun()) {
    ExternalResponse empty;
    empty.content_type.clear();
    Response r = external_head(call, empty);
    r.erase(beast_http::field::content_type);
    r.erase("Content-Security-Policy");
    r.prepare_payload();
    co_return r;
  }
  co_await call.stream.finish();
  co_return std::nullopt;
}

}  // namespace

MaybeResponse render_handler(Call& call, const core::DbRef& db, const std::string& ddoc,
                             const std::vector<std::string>& rest) {
  if (rest.at(0) == "_show") co_return co_await show(call, db, ddoc, rest);
  co_return co_await list(call, db, ddoc, rest);
}

}  // namespace chaise::http
