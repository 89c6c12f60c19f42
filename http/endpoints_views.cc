// Streamed views: /{db}/_all_docs, /_design_docs, /_local_docs, /_all_docs/queries, /_changes.
//
// Rows come from core cursors one page (one short transaction) at a time and are written to the
// ResponseStream as they are produced, so memory stays flat whatever the size of the answer and a
// client that reads slowly slows its producer down. Framing follows CouchDB 3:
//   {"total_rows":N,"offset":M[,"update_seq":S],"rows":[\r\n row,\r\n row \r\n]}
//   {"results":[\n row,\n row \n],\n"last_seq":S,"pending":P}
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>

#include "core/changes_notifier.h"
#include "core/shards.h"
#include "http/txn.h"

#include "core/views.h"
#include "http/request.h"
#include "http/router.h"

namespace chaise::http {

namespace {

using core::AllDocsKind;
using core::AllDocsQuery;

// Parameters from the query string and, for POST, the JSON body (body values win).
class Params {
 public:
  Params(const Query& query, const Json* body) : query_(query), body_(body) {}

  std::optional<Json> json(std::string_view key) const {
    if (body_ && body_->contains(key)) return (*body_)[std::string(key)];
    return query_.get_json(key);
  }
  bool boolean(std::string_view key, bool fallback) const {
    if (body_ && body_->contains(key)) {
      const Json& v = (*body_)[std::string(key)];
      if (!v.is_boolean()) throw_query_parse_error("Invalid boolean parameter: " + v.dump());
      return v.get<bool>();
    }
    return query_.get_bool(key, fallback);
  }
  // CouchDB's parse_pos_int: a non-negative integer.
  std::optional<std::int64_t> non_negative(std::string_view key) const {
    std::optional<std::int64_t> v;
    if (body_ && body_->contains(key)) {
      const Json& j = (*body_)[std::string(key)];
      if (!j.is_number_integer())
        throw_query_parse_error("Invalid value for positive integer: " + j.dump());
      v = j.get<std::int64_t>();
    } else if (auto s = query_.get(key)) {
      try {
        v = query_.get_int(key);
      } catch (const HttpError&) {
        throw_query_parse_error("Invalid value for positive integer: \"" + *s + "\"");
      }
    }
    if (v && *v < 0)
      throw_query_parse_error("Invalid value for positive integer: \"" + std::to_string(*v) + "\"");
    return v;
  }
  std::optional<std::string> string(std::string_view key) const {
    if (body_ && body_->contains(key)) {
      const Json& j = (*body_)[std::string(key)];
      return j.is_string() ? j.get<std::string>() : j.dump();
    }
    return query_.get(key);
  }

 private:
  const Query& query_;
  const Json* body_;
};

// Doc ids are strings; CouchDB collates other JSON keys around them (null, booleans and numbers
// before every string, arrays and objects after), which decides what such a bound selects.
enum class Side { below_all, at, above_all };
struct Bound {
  Side side = Side::at;
  std::string key;
};
Bound to_bound(const Json& j) {
  if (j.is_string()) return {Side::at, j.get<std::string>()};
  if (j.is_array() || j.is_object()) return {Side::above_all, {}};
  return {Side::below_all, {}};
}

struct AllDocsRequest {
  AllDocsQuery q;
  std::optional<std::vector<std::string>> keys;
  bool update_seq = false;
  bool empty = false;  // bounds that select nothing
};

AllDocsRequest parse_all_docs(const Params& p, AllDocsKind kind) {
  AllDocsRequest r;
  r.q.kind = kind;
  r.q.descending = p.boolean("descending", false);
  r.q.inclusive_end = p.boolean("inclusive_end", true);
  r.q.include_docs = p.boolean("include_docs", false);
  r.q.conflicts = p.boolean("conflicts", false);
  r.q.attachments = p.boolean("attachments", false);
  r.q.att_encoding_info = p.boolean("att_encoding_info", false);
  r.update_seq = p.boolean("update_seq", false);
  if (auto l = p.non_negative("limit")) r.q.limit = *l;
  if (auto s = p.non_negative("skip")) r.q.skip = *s;
  if (auto keys = p.json("keys")) {
    if (!keys->is_array()) throw_bad_request("`keys` parameter must be an array.");
    r.keys.emplace();
    for (const Json& k : *keys) r.keys->push_back(k.is_string() ? k.get<std::string>() : k.dump());
    return r;
  }
  std::optional<Json> start = p.json("key");
  std::optional<Json> end = start;
  if (!start) {
    start = p.json("startkey");
    if (!start) start = p.json("start_key");
    end = p.json("endkey");
    if (!end) end = p.json("end_key");
  }
  // In iteration order a start "below all strings" means: from the first key (ascending) or, when
  // descending, nothing at all; symmetric for the other cases.
  auto apply = [&](const std::optional<Json>& j, bool is_start) {
    if (!j) return;
    Bound b = to_bound(*j);
    std::optional<std::string>& slot = is_start ? r.q.start_key : r.q.end_key;
    const bool lower_side = is_start != r.q.descending;  // this bound limits the low end
    if (b.side == Side::at) {
      slot = b.key;
    } else if ((b.side == Side::below_all) != lower_side) {
      r.empty = true;  // e.g. ascending end key below every id
    }
  };
  apply(start, true);
  apply(end, false);
  return r;
}

std::string all_docs_head(std::int64_t total, std::int64_t offset, const std::string* seq) {
  std::string head = "{\"total_rows\":";
  head += total < 0 ? "null" : std::to_string(total);
  head += ",\"offset\":";
  head += total < 0 ? "null" : std::to_string(offset);
  if (seq) head += ",\"update_seq\":" + core::json_string(*seq);
  return head + ",\"rows\":[\r\n";
}

Response stream_head(const Request& req) {
  Response head{Status::ok, req.version()};
  head.set(beast_http::field::server, kServerHeader);
  head.set(beast_http::field::date, http_date_now());
  head.set(beast_http::field::content_type, "application/json");
  head.set(beast_http::field::cache_control, "must-revalidate");
  return head;
}

// Writes one all_docs result object (head, rows, tail) through `emit`, page by page.
template <typename Emit>
boost::asio::awaitable<bool> write_all_docs(const Call& call, const core::DbRef& db,
                                           const AllDocsRequest& r, Emit&& emit) {
  storage::Database& store = call.store();
  auto tr = store.create_transaction();
  core::AllDocsCursor cursor(db, r.q);
  auto total = cursor.total_rows(tr);
  if (!total.ok()) throw HttpError(core::storage_failure(total.error()));
  std::int64_t offset = 0;
  if (*total >= 0 && !r.keys) {
    auto o = cursor.offset(tr);
    if (!o.ok()) throw HttpError(core::storage_failure(o.error()));
    offset = *o;
  }
  std::optional<std::string> seq;
  if (r.update_seq) {
    auto s = core::update_seq(tr, db);
    if (!s.ok()) throw HttpError(core::storage_failure(s.error()));
    seq = s->str();
  }
  const std::string head = all_docs_head(*total, r.keys ? 0 : offset, seq ? &*seq : nullptr);
  if (!co_await emit(head)) co_return false;
  bool first = true;
  std::string chunk;
  auto append_rows = [&](std::vector<std::string>& rows) {
    chunk.clear();
    for (std::string& row : rows) {
      if (!first) chunk += ",\r\n";
      first = false;
      chunk += row;
    }
    rows.clear();
  };
  std::vector<std::string> rows;
  if (r.keys) {
    auto keyed = core::all_docs_keys(tr, db, *r.keys, r.q);
    if (!keyed.ok()) throw HttpError(core::storage_failure(keyed.error()));
    append_rows(*keyed);
    if (!co_await emit(chunk)) co_return false;
  } else if (!r.empty) {
    for (bool more = true; more;) {
      auto page_tr = store.create_transaction();  // one short transaction per page
      auto m = cursor.next_page(page_tr, call.ctx.stream_page_rows, rows);
      if (!m.ok()) throw HttpError(core::storage_failure(m.error()));
      more = *m;
      append_rows(rows);
      if (!chunk.empty() && !co_await emit(chunk)) co_return false;
    }
  }
  co_return co_await emit("\r\n]}");
}

MaybeResponse all_docs(Call& call, AllDocsKind kind) {
  require_method(call, "GET,HEAD,POST");
  const core::DbRef db = open_db_or_throw(call);
  std::optional<Json> body;
  if (call.is(beast_http::verb::post)) body = parse_json_object_body(call.req);
  const Params params(call.query, body ? &*body : nullptr);
  const AllDocsRequest r = parse_all_docs(params, kind);
  if (call.is(beast_http::verb::head)) co_return raw_json_response(call.req, Status::ok, "");

  if (!co_await call.stream.begin(stream_head(call.req))) co_return std::nullopt;
  auto emit = [&](std::string_view s) { return call.stream.write(s); };
  if (!co_await write_all_docs(call, db, r, emit)) co_return std::nullopt;
  co_await call.stream.write("\n");
  co_await call.stream.finish();
  co_return std::nullopt;
}

// POST /{db}/_all_docs/queries (and _design_docs/_local_docs): {"queries":[{...},...]}.
MaybeResponse all_docs_queries(Call& call, AllDocsKind kind) {
  require_method(call, "POST");
  const core::DbRef db = open_db_or_throw(call);
  const Json body = parse_json_object_body(call.req);
  if (!body.contains("queries") || !body["queries"].is_array())
    throw_bad_request("`queries` member must be a array.");
  std::vector<AllDocsRequest> requests;
  const Query no_query;
  for (const Json& q : body["queries"]) {
    if (!q.is_object()) throw_bad_request("Each query must be a JSON object.");
    requests.push_back(parse_all_docs(Params(no_query, &q), kind));
  }
  if (!co_await call.stream.begin(stream_head(call.req))) co_return std::nullopt;
  if (!co_await call.stream.write("{\"results\":[\n")) co_return std::nullopt;
  auto emit = [&](std::string_view s) { return call.stream.write(s); };
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (i > 0 && !co_await call.stream.write(",\n")) co_return std::nullopt;
    if (!co_await write_all_docs(call, db, requests[i], emit)) co_return std::nullopt;
  }
  co_await call.stream.write("\n]}\n");
  co_await call.stream.finish();
  co_return std::nullopt;
}

// ---- _changes ----

enum class Feed { normal, longpoll, continuous, eventsource };

struct ChangesRequest {
  core::ChangesQuery q;
  Feed feed = Feed::normal;
  std::optional<std::int64_t> heartbeat_ms;  // live feeds: send a newline this often
  std::int64_t timeout_ms = 60'000;          // live feeds without heartbeat: give up after this
};

ChangesRequest parse_changes(const Call& call, const Json* body, const core::DbRef& db,
                             storage::Transaction& tr) {
  const Params p(call.query, body);
  ChangesRequest r;
  core::ChangesQuery& q = r.q;
  const std::string feed = p.string("feed").value_or("normal");
  if (feed == "normal") {
    r.feed = Feed::normal;
  } else if (feed == "longpoll") {
    r.feed = Feed::longpoll;
  } else if (feed == "continuous" || feed == "live") {
    r.feed = Feed::continuous;
  } else if (feed == "eventsource") {
    r.feed = Feed::eventsource;
  } else {
    throw_bad_request("Supported `feed` types: normal, continuous, live, longpoll, eventsource");
  }
  r.timeout_ms = call.ctx.changes_timeout_ms;
  if (auto t = p.string("timeout")) {
    try {
      r.timeout_ms = std::stoll(*t);
    } catch (const std::exception&) {
      throw_bad_request("Invalid timeout value: " + *t);
    }
    if (r.timeout_ms < 0) throw_bad_request("Invalid timeout value: " + *t);
  }
  if (auto h = p.string("heartbeat")) {
    if (*h == "true") {
      r.heartbeat_ms = call.ctx.changes_timeout_ms;
    } else if (*h != "false") {
      std::int64_t v = -1;
      try {
        v = std::stoll(*h);
      } catch (const std::exception&) {
      }
      if (v <= 0) throw_bad_request("Invalid heartbeat value. Expecting a positive integer value.");
      r.heartbeat_ms = v;
    }
  }
  if (auto since = p.string("since")) {
    if (*since == "now") {
      auto s = core::update_seq(tr, db);
      if (!s.ok()) throw HttpError(core::storage_failure(s.error()));
      q.since = *s;
    } else {
      auto s = core::Sequence::parse(*since);
      if (!s) throw_bad_request("Malformed sequence supplied in 'since' parameter.");
      q.since = *s;
    }
  }
  q.descending = p.boolean("descending", false);
  if (auto l = p.non_negative("limit")) q.limit = *l;
  const std::string style = p.string("style").value_or("main_only");
  if (style != "main_only" && style != "all_docs")
    throw_bad_request("Invalid `style` parameter value: " + style);
  q.all_docs_style = style == "all_docs";
  q.include_docs = p.boolean("include_docs", false);
  q.conflicts = p.boolean("conflicts", false);
  q.attachments = p.boolean("attachments", false);
  q.att_encoding_info = p.boolean("att_encoding_info", false);
  if (auto si = p.string("seq_interval")) {
    std::int64_t n = 0;
    try {
      n = std::stoll(*si);
    } catch (const std::exception&) {
      n = 0;
    }
    if (n <= 0) throw_bad_request("invalid_seq_interval");
    q.seq_interval = n;
  }
  if (auto filter = p.string("filter")) {
    if (*filter == "_doc_ids") {
      std::optional<Json> ids = p.json("doc_ids");
      if (!ids || !ids->is_array())
        throw_bad_request("`doc_ids` filter parameter is not a list of doc ids.");
      q.doc_ids.emplace();
      for (const Json& id : *ids) {
        if (!id.is_string()) throw_bad_request("`doc_ids` filter parameter is not a list of doc ids.");
        q.doc_ids->push_back(id.get<std::string>());
      }
    } else if (*filter == "_design") {
      q.design_only = true;
    } else if (*filter == "_selector") {
      std::optional<Json> sel = p.json("selector");
      if (!sel) throw_bad_request("Selector must be specified in POST payload");
      auto parsed = core::Selector::parse(*sel);
      if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(*e);
      q.selector = std::get<core::Selector>(std::move(parsed));
    } else if (*filter == "_view") {
      throw_bad_request("filter=" + *filter + " is not available in this version of Chaise");
    } else {
      throw_bad_request("Chaise has no JavaScript engine: filter functions (" + *filter +
                        ") are not supported");
    }
  }
  return r;
}

// The "seq" of a serialized change row ({"seq":"...", ...}); empty when it is null.
std::string_view row_seq(std::string_view row) {
  constexpr std::string_view kPrefix = "{\"seq\":\"";
  if (row.substr(0, kPrefix.size()) != kPrefix) return {};
  row.remove_prefix(kPrefix.size());
  return row.substr(0, row.find('"'));
}

// Frames rows of one feed type.
class FeedWriter {
 public:
  FeedWriter(ResponseStream& stream, Feed feed) : stream_(stream), feed_(feed) {}

  boost::asio::awaitable<bool> open() {
    if (feed_ == Feed::normal || feed_ == Feed::longpoll) co_return co_await stream_.write("{\"results\":[\n");
    co_return true;
  }
  boost::asio::awaitable<bool> rows(std::vector<std::string>& rows) {
    chunk_.clear();
    for (std::string& row : rows) {
      switch (feed_) {
        case Feed::normal:
        case Feed::longpoll:
          if (!first_) chunk_ += ",\n";
          chunk_ += row;
          break;
        case Feed::continuous:
          chunk_ += row;
          chunk_ += "\n";
          break;
        case Feed::eventsource:
          chunk_ += "data: ";
          chunk_ += row;
          chunk_ += "\nid: ";
          chunk_ += row_seq(row);
          chunk_ += "\n\n";
          break;
      }
      first_ = false;
    }
    rows.clear();
    if (chunk_.empty()) co_return true;
    if (!co_await stream_.write(chunk_)) co_return false;
    // Live feeds deliver each batch as soon as it exists.
    if (feed_ != Feed::normal) co_return co_await stream_.flush();
    co_return true;
  }
  boost::asio::awaitable<bool> heartbeat() {
    // (Kept out of the co_await expression: GCC 12 miscompiles a conditional there.)
    std::string_view beat = "\n";
    if (feed_ == Feed::eventsource) beat = "event: heartbeat\ndata: \n\n";
    if (!co_await stream_.write(beat)) co_return false;
    co_return co_await stream_.flush();
  }
  // `topology_changed`: a shard feed reached the end of a replaced shard (RFC 004); the consumer
  // reads GET /{db}/_changes/_meta?since=<last_seq> and moves to the new shards.
  boost::asio::awaitable<bool> close(const core::Sequence& last_seq, std::int64_t pending,
                                     bool topology_changed) {
    std::string tail_fields = "\"last_seq\":" + core::json_string(last_seq.str()) +
                              ",\"pending\":" + std::to_string(pending);
    if (topology_changed) tail_fields += ",\"topology_changed\":true";
    tail_fields += "}\n";
    switch (feed_) {
      case Feed::normal:
      case Feed::longpoll:
        if (!co_await stream_.write("\n],\n" + tail_fields)) co_return false;
        break;
      case Feed::continuous:
        if (!co_await stream_.write("{" + tail_fields)) co_return false;
        break;
      case Feed::eventsource:
        if (topology_changed && !co_await stream_.write("event: topology_changed\ndata: {" + tail_fields + "\n"))
          co_return false;
        break;
    }
    co_return co_await stream_.finish();
  }

 private:
  ResponseStream& stream_;
  Feed feed_;
  bool first_ = true;
  std::string chunk_;
};

// What a live feed waits on between reads: a wake-up from the notifier, its heartbeat/timeout
// timer, or the client going away. Shared with callbacks that may outlive one wait.
struct FeedWait {
  explicit FeedWait(boost::asio::any_io_executor ex) : timer(ex) {}
  boost::asio::steady_timer timer;
  bool woken = false;
  bool closed = false;
};

MaybeResponse changes(Call& call, std::optional<std::int64_t> shard) {
  require_method(call, "GET,HEAD,POST");
  const core::DbRef db = open_db_or_throw(call);
  std::optional<Json> body;
  if (call.is(beast_http::verb::post)) body = parse_json_object_body(call.req);
  storage::Database& store = call.store();
  ChangesRequest r;
  {
    auto tr = store.create_transaction();
    r = parse_changes(call, body ? &*body : nullptr, db, tr);
    if (shard) {
      auto maps = core::read_shard_maps(tr, db, storage::Snapshot::yes);
      if (!maps.ok()) throw HttpError(core::storage_failure(maps.error()));
      auto ids = core::all_shards(*maps);
      if (std::find(ids.begin(), ids.end(), *shard) == ids.end())
        throw HttpError(404, "not_found", "No such changes shard: " + std::to_string(*shard));
      r.q.shard = shard;
    }
  }
  if (call.is(beast_http::verb::head)) co_return raw_json_response(call.req, Status::ok, "");
  const bool live = r.feed != Feed::normal;
  if (live && !call.ctx.notifier) throw_bad_request("live feeds are not enabled");

  Response head = stream_head(call.req);
  if (r.feed == Feed::eventsource) head.set(beast_http::field::content_type, "text/event-stream");
  if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
  FeedWriter out(call.stream, r.feed);
  if (!co_await out.open()) co_return std::nullopt;

  auto executor = co_await boost::asio::this_coro::executor;
  auto wait = std::make_shared<FeedWait>(executor);
  if (live) {
    call.stream.watch_peer([wait] {
      wait->closed = true;
      wait->timer.cancel();
    });
  }
  core::Sequence since = r.q.since;
  std::int64_t emitted = 0;
  std::optional<core::ChangesCursor> last_cursor;
  std::vector<std::string> rows;
  for (;;) {
    core::ChangesQuery q = r.q;
    q.since = since;
    if (r.q.limit >= 0) q.limit = r.q.limit - emitted;
    last_cursor.emplace(db, std::move(q));
    core::ChangesCursor& cursor = *last_cursor;
    std::int64_t counter = 0;
    for (bool more = true; more;) {
      auto page_tr = store.create_transaction();
      auto m = cursor.next_page(page_tr, call.ctx.stream_page_rows, rows);
      if (!m.ok()) throw HttpError(core::storage_failure(m.error()));
      more = *m;
      if (live) {
        // Read with the page, in its snapshot: the notifier wakes us for anything after it.
        auto c = core::read_update_counter(page_tr, db);
        if (!c.ok()) throw HttpError(core::storage_failure(c.error()));
        counter = *c;
      }
      if (!co_await out.rows(rows)) co_return std::nullopt;
    }
    if (!r.q.descending) since = cursor.last_seq();
    emitted += cursor.emitted();
    if (!live || (r.q.limit >= 0 && emitted >= r.q.limit) || r.q.descending) break;
    if (cursor.topology_changed()) break;  // a replaced shard never gets new changes
    if (r.feed == Feed::longpoll && emitted > 0) break;

    // Nothing (more) to send: wait for the database to change.
    wait->woken = false;
    auto waiter = call.ctx.notifier->wait(db, counter, [wait, executor] {
      boost::asio::post(executor, [wait] {
        wait->woken = true;
        wait->timer.cancel();
      });
    });
    bool timed_out = false;
    const auto started = std::chrono::steady_clock::now();
    for (;;) {
      const auto interval = std::chrono::milliseconds(r.heartbeat_ms.value_or(r.timeout_ms));
      wait->timer.expires_after(interval);
      if (!wait->woken && !wait->closed) {
        boost::system::error_code ec;
        co_await wait->timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      }
      if (wait->closed) co_return std::nullopt;  // the client left: free the feed now
      if (wait->woken) break;
      if (r.heartbeat_ms) {
        if (!co_await out.heartbeat()) co_return std::nullopt;
        continue;
      }
      if (std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(r.timeout_ms)) {
        timed_out = true;
        break;
      }
    }
    if (timed_out) break;
  }
  auto last_tr = store.create_transaction();
  auto pending = last_cursor->pending(last_tr);
  if (!pending.ok()) throw HttpError(core::storage_failure(pending.error()));
  const core::Sequence last_seq = r.q.descending ? last_cursor->last_seq() : since;
  co_await out.close(last_seq, *pending, last_cursor->topology_changed());
  co_return std::nullopt;
}

Json shard_ids_json(const std::vector<std::int64_t>& ids) {
  Json a = Json::array();
  for (std::int64_t id : ids) a.push_back(id);
  return a;
}

// GET /{db}/_changes/_meta?since=S: the shard topology in force at S and every later one.
// PUT /{db}/_changes/_meta {"shards": N}: reshard from this sequence on (earlier entries stay).
MaybeResponse changes_meta(Call& call) {
  require_method(call, "GET,HEAD,PUT");
  const core::DbRef db = open_db_or_throw(call);
  if (call.is(beast_http::verb::put)) {
    const Json body = parse_json_object_body(call.req);
    if (!body.contains("shards") || !body["shards"].is_number_integer())
      throw_bad_request("`shards` must be an integer");
    const std::int64_t n = body["shards"].get<std::int64_t>();
    std::optional<core::Outcome<std::vector<std::int64_t>>> result;
    storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
      auto r = core::reshard(tr, db, static_cast<int>(std::clamp<std::int64_t>(n, -1, 1'000'000)));
      if (!r.ok()) return r.error();
      result = std::move(*r);
      return {};
    });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
    if (auto* e = std::get_if<core::CouchError>(&*result)) throw HttpError(*e);
    co_return json_response(call.req, Status::ok,
                            Json{{"ok", true},
                                 {"shards", shard_ids_json(std::get<std::vector<std::int64_t>>(*result))}});
  }
  auto tr = call.store().create_transaction();
  core::Sequence since;
  if (auto v = call.query.get("since")) {
    if (*v == "now") {
      auto u = core::update_seq(tr, db);
      if (!u.ok()) throw HttpError(core::storage_failure(u.error()));
      since = *u;
    } else {
      auto parsed = core::Sequence::parse(*v);
      if (!parsed) throw_bad_request("Malformed sequence supplied in 'since' parameter.");
      since = *parsed;
    }
  }
  auto maps = core::read_shard_maps(tr, db, storage::Snapshot::yes);
  if (!maps.ok()) throw HttpError(core::storage_failure(maps.error()));
  const core::ShardMap& in_force = core::map_for(*maps, since);
  Json topology = Json::array();
  bool started = false;
  for (const core::ShardMap& m : *maps) {
    started = started || &m == &in_force;
    if (!started) continue;
    topology.push_back({{"start_seq", m.start.str()},
                        {"hash", m.scheme},
                        {"shards", shard_ids_json(m.shards)},
                        {"tombstone", m.tombstone}});
  }
  co_return json_response(call.req, Status::ok,
                          Json{{"since", since.str()},
                               {"shards", shard_ids_json(in_force.shards)},
                               {"topology", std::move(topology)}});
}

}  // namespace

MaybeResponse handle_views(Call& call) {
  const std::string& view = call.path.at(1);
  const AllDocsKind kind = view == "_design_docs"  ? AllDocsKind::design_docs
                           : view == "_local_docs" ? AllDocsKind::local_docs
                                                   : AllDocsKind::all_docs;
  if (view == "_changes") {
    if (call.path.size() == 2) co_return co_await changes(call, std::nullopt);
    if (call.path.size() != 3) throw HttpError(404, "not_found", "missing");
    if (call.path[2] == "_meta") co_return co_await changes_meta(call);
    std::int64_t shard = -1;
    const std::string& text = call.path[2];
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), shard);
    if (ec != std::errc() || p != text.data() + text.size() || shard < 0)
      throw HttpError(404, "not_found", "No such changes shard: " + text);
    co_return co_await changes(call, shard);
  }
  if (call.path.size() == 2) co_return co_await all_docs(call, kind);
  if (call.path.size() == 3 && call.path[2] == "queries") co_return co_await all_docs_queries(call, kind);
  throw HttpError(404, "not_found", "missing");
}

}  // namespace chaise::http
