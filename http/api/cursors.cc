// Streamed cursors (the built-in indexes): /{db}/_all_docs, /_design_docs, /_local_docs, /_all_docs/queries, /_changes.
//
// Rows come from core cursors one page (one short transaction) at a time and are written to the
// ResponseStream as they are produced, so memory stays flat whatever the size of the answer and a
// client that reads slowly slows its producer down. Pages after the first are read without filling
// the block cache (Transaction::disable_read_cache): a stream that long is a one-pass read, and
// would otherwise push out the blocks point reads keep warm. Framing follows CouchDB 3:
//   {"total_rows":N,"offset":M[,"update_seq":S],"rows":[\r\n row,\r\n row \r\n]}
//   {"results":[\n row,\n row \n],\n"last_seq":S,"pending":P}
#include "core/index/cursors.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <chrono>
#include <limits>

#include "core/db/changes_notifier.h"
#include "core/db/shards.h"
#include "core/index/filters.h"
#include "http/api/etag.h"
#include "http/api/feeds.h"
#include "http/api/js_request.h"
#include "http/api/metrics.h"
#include "http/api/pages.h"
#include "http/api/render.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"

namespace chaise::http {

namespace {

using core::AllDocsKind;
using core::AllDocsQuery;

// An integer as Erlang's list_to_integer reads it (optional sign, digits, nothing else); values
// beyond 64 bits saturate, since CouchDB's bignums compare past every limit. nullopt otherwise.
std::optional<std::int64_t> integer_param_saturating(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range) v = std::numeric_limits<std::int64_t>::max();
  return text.front() == '-' ? -v : v;
}

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
      if (!v.is_boolean())
        throw HttpError(err::query_parse_error("Invalid boolean parameter: " + v.dump()));
      return v.get<bool>();
    }
    return query_.get_bool(key, fallback);
  }
  // chttpd_db:parse_changes_query's reading of a flag: on only for exactly "true" in the query
  // string, any other value ignored rather than refused (a JSON body's value must be a boolean).
  bool flag(std::string_view key) const {
    if (body_ && body_->contains(key)) return boolean(key, false);
    return query_.get(key) == "true";
  }
  // CouchDB's parse_pos_int: a non-negative integer.
  std::optional<std::int64_t> non_negative(std::string_view key) const {
    std::optional<std::int64_t> v;
    if (body_ && body_->contains(key)) {
      const Json& j = (*body_)[std::string(key)];
      if (!j.is_number_integer())
        throw HttpError(err::query_parse_error("Invalid value for positive integer: " + j.dump()));
      v = j.get<std::int64_t>();
    } else if (auto s = query_.get(key)) {
      try {
        v = query_.get_int(key);
      } catch (const HttpError&) {
        throw HttpError(
            err::query_parse_error("Invalid value for positive integer: \"" + *s + "\""));
      }
    }
    if (v && *v < 0)
      throw HttpError(err::query_parse_error("Invalid value for positive integer: \"" +
                                             std::to_string(*v) + "\""));
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

// Doc ids are strings. _all_docs compares keys in raw (Erlang term) order, not with the view
// collation: every other JSON value, arrays and objects included, sorts before every string
// (CouchDB 3.5: startkey={} selects every document, endkey={} none).
enum class Side { below_all, at };
struct Bound {
  Side side = Side::at;
  std::string key;
};
Bound to_bound(const Json& j) {
  if (j.is_string()) return {Side::at, j.get<std::string>()};
  return {Side::below_all, {}};
}

struct AllDocsRequest {
  AllDocsQuery q;
  std::optional<std::vector<core::AllDocsKey>> keys;
  bool update_seq = false;
  bool empty = false;  // bounds that select nothing
  // ... because of the start bound: every document comes before it, so offset is total_rows.
  bool empty_before_start = false;
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
    if (!keys->is_array()) throw HttpError(err::bad_request("`keys` parameter must be an array."));
    // couch_mrview_util:validate_args (checked against CouchDB 3.5).
    for (std::string_view bound : {"key", "startkey", "start_key", "endkey", "end_key"})
      if (p.json(bound))
        throw HttpError(
            err::query_parse_error("`keys` is incompatible with `key`, `start_key` and `end_key`"));
    r.keys.emplace();
    for (const Json& k : *keys) {
      if (k.is_string()) {
        r.keys->push_back({k.get<std::string>(), true});
      } else {
        r.keys->push_back({k.dump(), false});
      }
    }
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
  // A bound below every id is no bound at the low end (an ascending start, a descending end) and
  // selects nothing at the high end.
  auto apply = [&](const std::optional<Json>& j, bool is_start) {
    if (!j) return;
    Bound b = to_bound(*j);
    std::optional<std::string>& slot = is_start ? r.q.start_key : r.q.end_key;
    const bool lower_side = is_start != r.q.descending;  // this bound limits the low end
    if (b.side == Side::at) {
      slot = b.key;
    } else if (!lower_side) {
      r.empty = true;  // e.g. ascending end key below every id
      r.empty_before_start = r.empty_before_start || is_start;
    }
  };
  apply(start, true);
  apply(end, false);
  return r;
}

// /{db}/_partition/{p}/_all_docs: the id range is narrowed to the partition's ("p:" up to
// "p:\ufff0", as couch_partition:start_key/end_key); `keys` are looked up as given (CouchDB
// 3.5 does not filter them either).
void clamp_to_partition(AllDocsRequest& r, const std::optional<std::string>& partition) {
  if (!partition || r.keys) return;
  const std::string lo = *partition + ":";
  const std::string hi = *partition + ":\xef\xbf\xb0";
  std::optional<std::string>& low = r.q.descending ? r.q.end_key : r.q.start_key;
  std::optional<std::string>& high = r.q.descending ? r.q.start_key : r.q.end_key;
  if (!low || *low < lo) low = lo;
  if (!high || *high > hi) {
    high = hi;
    r.q.inclusive_end = true;
  }
}

// The members of an all_docs answer before its rows: "total_rows":T,"offset":O[,"update_seq":S]
// (read in `tr`). An offset of null is CouchDB's answer for _local_docs and for any `keys` query.
std::string all_docs_head_fields(storage::Transaction& tr, const core::DbRef& db,
                                 core::AllDocsCursor& cursor, const AllDocsRequest& r) {
  const auto total = value_or_throw(cursor.total_rows(tr));
  std::int64_t offset = -1;
  if (total >= 0 && !r.keys) {
    auto o = value_or_throw(cursor.offset(tr));
    offset = r.empty_before_start ? total : o;
  }
  std::string head = "\"total_rows\":";
  head += total < 0 ? "null" : std::to_string(total);
  head += ",\"offset\":";
  head += offset < 0 ? "null" : std::to_string(offset);
  if (r.update_seq) {
    auto s = value_or_throw(core::update_seq(tr, db));
    head += ",\"update_seq\":" + core::json_string(s.str());
  }
  return head;
}

// Writes one all_docs result object (head, rows, tail) through `emit`, page by page.
template <typename Emit>
boost::asio::awaitable<bool> write_all_docs(const Call& call, const core::DbRef& db,
                                            const AllDocsRequest& r, Emit&& emit) {
  storage::Database& store = call.store();
  auto tr = store.create_transaction();
  core::AllDocsCursor cursor(db, r.q);
  const std::string head = "{" + all_docs_head_fields(tr, db, cursor, r) + ",\"rows\":[\r\n";
  if (!co_await emit(head)) co_return false;
  RowJoiner joiner;
  std::string chunk;
  std::vector<std::string> rows;
  if (r.keys) {
    auto keyed = value_or_throw(core::all_docs_keys(tr, db, *r.keys, r.q));
    joiner.append(chunk, keyed);
    if (!co_await emit(chunk)) co_return false;
  } else if (!r.empty) {
    Pages pages(store);
    for (bool more = true; more;) {
      more = pages.read_next(cursor, call.ctx.stream_page_rows, rows);
      chunk.clear();
      joiner.append(chunk, rows);
      if (!chunk.empty() && !co_await emit(chunk)) co_return false;
    }
  }
  co_return co_await emit("\r\n]}");
}

// _all_docs' rows for a list function.
class AllDocsListRows final : public ListRows {
 public:
  AllDocsListRows(const Call& call, const core::DbRef& db, AllDocsRequest r)
      : call_(call), db_(db), r_(std::move(r)), pages_(call.store()), cursor_(db, r_.q) {
    auto tr = call.store().create_transaction();
    head_ = "{" + all_docs_head_fields(tr, db, cursor_, r_) + "}";
  }
  const std::string& head() const override { return head_; }
  bool next_page(std::vector<std::string>& rows, std::optional<core::CouchError>&) override {
    if (r_.keys) {
      auto tr = pages_.next_transaction();
      auto keyed = value_or_throw(core::all_docs_keys(tr, db_, *r_.keys, r_.q));
      for (std::string& row : keyed) rows.push_back(std::move(row));
      return false;
    }
    if (r_.empty) return false;
    return pages_.read_next(cursor_, call_.ctx.stream_page_rows, rows);
  }

 private:
  const Call& call_;
  core::DbRef db_;
  AllDocsRequest r_;
  Pages pages_;
  core::AllDocsCursor cursor_;
  std::string head_;
};

MaybeResponse all_docs(Call& call, AllDocsKind kind) {
  require_method(call, "GET,HEAD,POST");
  const core::DbRef db = open_db_or_throw(call);
  std::optional<Json> body;
  if (call.is(beast_http::verb::post)) body = parse_json_object_body(call.req);
  const Params params(call.query, body ? &*body : nullptr);
  AllDocsRequest r = parse_all_docs(params, kind);
  clamp_to_partition(r, call.partition);
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
    throw HttpError(err::bad_request("`queries` member must be a array."));
  std::vector<AllDocsRequest> requests;
  const Query no_query;
  for (const Json& q : body["queries"]) {
    if (!q.is_object()) throw HttpError(err::bad_request("Each query must be a JSON object."));
    // couch_mrview_http:parse_param reads a one-element `keys` of a query here as `key`: a
    // range, so its answer has an offset and no not_found or deleted rows.
    const auto keys = q.find("keys");
    if (keys != q.end() && keys->is_array() && keys->size() == 1 && !q.contains("key") &&
        !q.contains("startkey") && !q.contains("start_key") && !q.contains("endkey") &&
        !q.contains("end_key")) {
      Json single = q;
      single.erase("keys");
      single["key"] = (*keys)[0];
      requests.push_back(parse_all_docs(Params(no_query, &single), kind));
      clamp_to_partition(requests.back(), call.partition);
      continue;
    }
    requests.push_back(parse_all_docs(Params(no_query, &q), kind));
    clamp_to_partition(requests.back(), call.partition);
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

struct ChangesRequest {
  core::ChangesQuery q;
  Feed feed = Feed::normal;
  std::optional<std::int64_t> heartbeat_ms;  // live feeds: send a newline this often
  std::int64_t timeout_ms = 60'000;          // live feeds without heartbeat: give up after this
};

// fabric_view_changes accepts a sequence in double quotes too; that is how the JSON "id:" of an
// eventsource event comes back in Last-Event-ID.
std::string_view unquote_seq(std::string_view seq) {
  if (seq.starts_with('"')) seq.remove_prefix(1);
  if (seq.ends_with('"')) seq.remove_suffix(1);
  return seq;
}

// "ddoc/name" as couch_changes:configure_filter splits it (string:tokens: empty parts dropped).
std::vector<std::string> name_parts(std::string_view name) {
  std::vector<std::string> parts;
  while (!name.empty()) {
    const std::size_t slash = name.find('/');
    const std::string_view part = name.substr(0, slash);
    if (!part.empty()) parts.push_back(unquote_plus(part));
    if (slash == std::string_view::npos) break;
    name.remove_prefix(slash + 1);
  }
  return parts;
}

// Opens _design/<ddoc> and follows `section`.`member` in it, with CouchDB's answers
// (couch_changes:open_ddoc and couch_util:get_nested_json_value): 404 "missing" or "deleted" for
// the document, 404 "missing json key: <key>", or 404 "json_mismatch" when `section` is not an
// object.
void require_ddoc_member(storage::Transaction& tr, const core::DbRef& db, const std::string& ddoc,
                         const std::string& section, const std::string& member) {
  auto doc = value_or_throw(core::get_doc_json(tr, db, "_design/" + ddoc, core::DocReadOptions{}));
  if (auto* e = std::get_if<core::CouchError>(&doc)) throw HttpError(*e);
  const Json body = Json::parse(std::get<std::string>(doc));
  const auto s = body.find(section);
  if (s == body.end()) throw HttpError(err::not_found("missing json key: " + section));
  if (!s->is_object()) throw HttpError(err::not_found("json_mismatch"));
  if (!s->contains(member)) throw HttpError(err::not_found("missing json key: " + member));
}

// A JavaScript filter on the feed, compiled before the feed starts (a compilation error is the
// answer then; an error while the feed runs cuts the response off, as CouchDB's does).
void set_js_filter(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                   const std::vector<std::string>& parts, core::JsChangesFilter::Kind kind,
                   core::ChangesQuery& q) {
  core::js::Engine& engine = js_engine(call);
  auto f = std::make_shared<core::JsChangesFilter>(
      engine, load_design_doc(tr, db, parts[0]), kind, parts[1],
      kind == core::JsChangesFilter::Kind::filter ? js_request_object(call, std::nullopt).dump()
                                                  : std::string("{}"));
  if (auto e = f->check()) throw HttpError(*e);
  q.doc_filter = std::move(f);
}

// couch_changes:configure_filter: the built-in filters, then "ddoc/name" (an empty name or one
// of only slashes means no filter). JavaScript filters run in-process (core/index/filters.h).
void configure_filter(const Call& call, const std::string& filter, const Params& p,
                      const core::DbRef& db, storage::Transaction& tr, core::ChangesQuery& q) {
  if (filter == "_doc_ids") {
    std::optional<Json> ids = p.json("doc_ids");
    if (!ids || !ids->is_array())
      throw HttpError(err::bad_request("`doc_ids` filter parameter is not a list of doc ids."));
    q.doc_ids.emplace();
    for (const Json& id : *ids) {
      if (!id.is_string())
        throw HttpError(err::bad_request("`doc_ids` filter parameter is not a list of doc ids."));
      q.doc_ids->push_back(id.get<std::string>());
    }
  } else if (filter == "_design") {
    q.design_only = true;
  } else if (filter == "_selector") {
    std::optional<Json> sel = p.json("selector");
    if (!sel) throw HttpError(err::bad_request("Selector must be specified in POST payload"));
    // couch_changes:check_selector: Mango's reasons, all as 400 bad_request.
    if (!sel->is_object())
      throw HttpError(err::bad_request("Selector error: expected a JSON object"));
    auto parsed = core::Selector::parse(*sel);
    if (auto* e = std::get_if<core::CouchError>(&parsed))
      throw HttpError(err::bad_request(std::move(e->reason)));
    q.selector = std::get<core::Selector>(std::move(parsed));
  } else if (filter == "_view") {
    const std::string view = p.string("view").value_or("");
    if (view.empty()) throw HttpError(err::bad_request("`view` filter parameter is not provided."));
    const auto parts = name_parts(view);
    // One part, or more than two, is a 500 (case_clause) in CouchDB 3.5.
    if (parts.size() != 2)
      throw HttpError(err::bad_request("`view` must be of the form `designname/viewname`"));
    require_ddoc_member(tr, db, parts[0], "views", parts[1]);
    set_js_filter(call, tr, db, parts, core::JsChangesFilter::Kind::view, q);
  } else if (filter.starts_with('_')) {
    throw HttpError(err::bad_request("unknown builtin filter name"));
  } else if (!filter.empty()) {
    const auto parts = name_parts(filter);
    if (parts.empty()) return;
    if (parts.size() != 2)
      throw HttpError(err::bad_request("`filter` must be of the form `designname/filtername`"));
    require_ddoc_member(tr, db, parts[0], "filters", parts[1]);
    set_js_filter(call, tr, db, parts, core::JsChangesFilter::Kind::filter, q);
  }
}

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
    throw HttpError(err::bad_request(
        "Supported `feed` types: normal, continuous, live, longpoll, eventsource"));
  }
  // couch_changes:get_changes_timeout: both are capped by [chttpd] changes_timeout.
  const std::int64_t max_ms = call.ctx.changes_timeout_ms;
  r.timeout_ms = max_ms;
  if (auto t = p.string("timeout")) {
    // CouchDB answers 500 badarg for what is not an integer ("1e3", "1.5"); Chaise says 400.
    auto v = integer_param_saturating(*t);
    if (!v || *v < 0) throw HttpError(err::bad_request("Invalid timeout value: " + *t));
    r.timeout_ms = std::min(*v, max_ms);
  }
  if (auto h = p.string("heartbeat")) {
    if (*h == "true") {
      r.heartbeat_ms = max_ms;
    } else {
      auto v = integer_param_saturating(*h);
      if (!v)
        throw HttpError(err::bad_request(
            "Invalid heartbeat value. Expecting a positive integer value (in milliseconds)."));
      if (*v <= 0)
        throw HttpError(err::bad_request(
            "The heartbeat value should be a positive integer (in milliseconds)."));
      r.heartbeat_ms = std::min(*v, max_ms);
    }
  }
  std::optional<std::string> since = p.string("since");
  // A browser's EventSource reconnects with the id of the last event it got (chttpd_db
  // parse_changes_query: it overrides `since`).
  if (const auto last_event_id = call.req["Last-Event-ID"];
      r.feed == Feed::eventsource && !last_event_id.empty())
    since = std::string(last_event_id);
  if (since) {
    if (*since == "now") {
      auto s = value_or_throw(core::update_seq(tr, db));
      q.since = s;
    } else {
      auto s = core::Sequence::parse(unquote_seq(*since));
      if (!s)
        throw HttpError(err::bad_request("Malformed sequence supplied in 'since' parameter."));
      q.since = *s;
    }
  }
  q.descending = p.flag("descending");
  if (auto l = p.non_negative("limit")) q.limit = *l;
  const std::string style = p.string("style").value_or("main_only");
  if (style != "main_only" && style != "all_docs")
    throw HttpError(err::bad_request("Invalid `style` parameter value: " + style));
  q.all_docs_style = style == "all_docs";
  q.include_docs = p.flag("include_docs");
  q.conflicts = p.flag("conflicts");
  q.attachments = p.flag("attachments");
  q.att_encoding_info = p.flag("att_encoding_info");
  if (auto si = p.string("seq_interval")) {
    std::int64_t n = 0;
    try {
      n = std::stoll(*si);
    } catch (const std::exception&) {
      n = 0;
    }
    if (n <= 0) throw HttpError(err::bad_request("invalid_seq_interval"));
    q.seq_interval = n;
  }
  if (auto filter = p.string("filter")) configure_filter(call, *filter, p, db, tr, q);
  return r;
}

// The ETag of a normal feed (CouchDB sends one, and answers If-None-Match with 304). CouchDB
// derives it from the database info alone; Chaise's covers what decides the answer: the database,
// its update_seq, the request (query string and body), and for one shard's feed the shard maps
// (a reshard can set topology_changed without a new change).
std::string changes_etag(const Call& call, const core::DbRef& db, storage::Transaction& tr,
                         const std::vector<core::ShardMap>* maps) {
  auto seq = value_or_throw(core::update_seq(tr, db));
  EtagBuilder etag;
  etag.add(db.name).add(seq.str()).add(call.req.target()).add(call.req.body());
  if (maps) {
    etag.add(std::to_string(maps->size()));
    for (const core::ShardMap& m : *maps) etag.add(m.start.str()).add(m.tombstone ? "t" : "f");
  }
  return etag.str();
}

// A live feed with nothing (more) to send: waits until database `db` changes past `counter` (the
// update counter read with the last page), sending heartbeats meanwhile.
boost::asio::awaitable<WaitEnd> wait_for_change(const Call& call, const core::DbRef& db,
                                                const ChangesRequest& r, FeedWriter& out,
                                                const std::shared_ptr<FeedWait>& wait,
                                                std::int64_t counter) {
  const ArmWake arm = [&call, &db, counter](core::ChangesNotifier::Wake wake) {
    return call.ctx.notifier->wait(db, counter, std::move(wake));
  };
  co_return co_await wait_for_more(out, wait, arm, r.heartbeat_ms, r.timeout_ms);
}

MaybeResponse changes(Call& call, std::optional<std::int64_t> shard) {
  require_method(call, "GET,HEAD,POST");
  const core::DbRef db = open_db_or_throw(call);
  std::optional<Json> body;
  if (call.is(beast_http::verb::post)) body = parse_json_object_body(call.req);
  storage::Database& store = call.store();
  ChangesRequest r;
  std::optional<std::string> etag;
  {
    auto tr = store.create_transaction();
    r = parse_changes(call, body ? &*body : nullptr, db, tr);
    std::optional<std::vector<core::ShardMap>> maps;
    if (shard) {
      auto m = value_or_throw(core::read_shard_maps(tr, db, storage::Snapshot::yes));
      auto ids = core::all_shards(m);
      if (std::find(ids.begin(), ids.end(), *shard) == ids.end())
        throw HttpError(err::not_found("No such changes shard: " + std::to_string(*shard)));
      r.q.shard = shard;
      maps = std::move(m);
    }
    if (r.feed == Feed::normal) etag = changes_etag(call, db, tr, maps ? &*maps : nullptr);
  }
  if (etag && if_none_match_has(call.req, *etag)) co_return not_modified_response(call.req, *etag);
  const std::optional<FeedGauge> feed_gauge =
      r.feed == Feed::normal ? std::nullopt : std::make_optional<FeedGauge>(call.ctx.metrics);
  if (call.is(beast_http::verb::head)) {
    // (Not named like `head` below: GCC 12 gives same-named locals of a coroutine one frame slot.)
    Response answer = raw_json_response(call.req, Status::ok, "");
    if (etag) answer.set(beast_http::field::etag, *etag);
    co_return answer;
  }
  const bool live = r.feed != Feed::normal;
  if (live && !call.ctx.notifier) throw HttpError(err::bad_request("live feeds are not enabled"));

  Response head = stream_head(call.req);
  if (etag) head.set(beast_http::field::etag, *etag);
  if (r.feed == Feed::eventsource) {
    head.set(beast_http::field::content_type, "text/event-stream");
    head.set(beast_http::field::cache_control, "no-cache");
  }
  FeedWriter out(call.stream, r.feed);
  // The head goes out with the first rows (or when the feed first waits or ends), so that a filter
  // that fails on the first page still gets its error answer, as in CouchDB.
  bool started = false;

  auto executor = co_await boost::asio::this_coro::executor;
  auto wait = std::make_shared<FeedWait>(executor);
  if (live) FeedWait::watch_client(wait, call.stream);
  core::Sequence since = r.q.since;
  std::int64_t emitted = 0;
  std::optional<core::ChangesCursor> last_cursor;
  std::vector<std::string> rows;
  for (;;) {
    core::ChangesQuery q = r.q;
    q.since = since;
    if (r.q.limit >= 0) q.limit = r.q.limit - emitted;
    q.rows_sent_before = emitted;
    if (last_cursor) q.count_bound = last_cursor->count_bound();
    last_cursor.emplace(db, std::move(q));
    core::ChangesCursor& cursor = *last_cursor;
    std::int64_t counter = 0;
    Pages pages(store);
    // Woken by this process's commit: the first page reads at its version, a round trip fewer.
    std::int64_t read_version = wait->fresh_version();
    for (bool more = true; more;) {
      auto page_tr = pages.next_transaction();
      if (read_version > 0) page_tr.set_read_version(std::exchange(read_version, 0));
      if (live) core::prefetch_update_counter(page_tr, db);
      more = Pages::read(cursor, page_tr, call.ctx.stream_page_rows, rows);
      if (live) {
        // Read with the page, in its snapshot: the notifier wakes us for anything after it.
        auto c = value_or_throw(core::read_update_counter(page_tr, db));
        counter = c;
      }
      if (!started && r.q.doc_filter && r.q.doc_filter->failed())
        throw HttpError(*r.q.doc_filter->failed());
      if (!started) {
        started = true;
        // NOLINTNEXTLINE(bugprone-use-after-move): once, on the first page (`started`)
        if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
        if (!co_await out.open()) co_return std::nullopt;
      }
      if (!co_await out.rows(rows)) co_return std::nullopt;
      if (r.q.doc_filter && r.q.doc_filter->failed()) {
        const core::CouchError& e = *r.q.doc_filter->failed();
        spdlog::warn("_changes of {}: the filter failed, response cut off: {}: {}", db.name,
                     e.error, e.reason);
        co_return std::nullopt;  // the response ends without its last chunk
      }
    }
    if (!r.q.descending) since = cursor.last_seq();
    emitted += cursor.emitted();
    if (!live || (r.q.limit >= 0 && emitted >= r.q.limit) || r.q.descending) break;
    if (cursor.topology_changed()) break;  // a replaced shard never gets new changes
    if (r.feed == Feed::longpoll && emitted > 0) break;

    // Nothing (more) to send: wait for the database to change.
    const WaitEnd end = co_await wait_for_change(call, db, r, out, wait, counter);
    if (end == WaitEnd::gone) co_return std::nullopt;
    if (end == WaitEnd::timed_out) break;
  }
  auto last_tr = store.create_transaction();
  auto pending = value_or_throw(last_cursor->pending(last_tr));
  const core::Sequence last_seq = r.q.descending ? last_cursor->last_seq() : since;
  std::string tail = "\"last_seq\":" + core::json_string(last_seq.str()) +
                     ",\"pending\":" + std::to_string(pending);
  // `topology_changed`: a shard feed reached the end of a replaced shard (RFC 004); the consumer
  // reads GET /{db}/_changes/_meta?since=<last_seq> and moves to the new shards.
  const bool topology_changed = last_cursor->topology_changed();
  if (topology_changed) tail += ",\"topology_changed\":true";
  co_await out.close(tail, topology_changed ? "topology_changed" : "");
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
    require_db_admin(call);  // resharding changes every feed consumer's topology
    const Json body = parse_json_object_body(call.req);
    if (!body.contains("shards") || !body["shards"].is_number_integer())
      throw HttpError(err::bad_request("`shards` must be an integer"));
    const std::int64_t n = body["shards"].get<std::int64_t>();
    std::optional<core::Outcome<std::vector<std::int64_t>>> result;
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto r =
              core::reshard(tr, db, static_cast<int>(std::clamp<std::int64_t>(n, -1, 1'000'000)));
          if (!r.ok()) return r.error();
          result = std::move(*r);
          return {};
        });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
    if (auto* e = std::get_if<core::CouchError>(&*result)) throw HttpError(*e);
    co_return json_response(
        call.req, Status::ok,
        Json{{"ok", true},
             {"shards", shard_ids_json(std::get<std::vector<std::int64_t>>(*result))}});
  }
  auto tr = call.store().create_transaction();
  core::Sequence since;
  bool now = false;
  if (auto v = call.query.get("since")) {
    if (*v == "now") {
      since = value_or_throw(core::update_seq(tr, db));
      now = true;
    } else {
      auto parsed = core::Sequence::parse(*v);
      if (!parsed)
        throw HttpError(err::bad_request("Malformed sequence supplied in 'since' parameter."));
      since = *parsed;
    }
  }
  auto maps = value_or_throw(core::read_shard_maps(tr, db, storage::Snapshot::yes));
  // "now" is the newest map: a reshard writes no document, so the update sequence can be older
  // than the map it started, and every change from now on is in that map.
  const core::ShardMap& in_force = now ? maps.back() : core::map_for(maps, since);
  Json topology = Json::array();
  bool started = false;
  for (const core::ShardMap& m : maps) {
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

std::unique_ptr<ListRows> all_docs_list_rows(const Call& call, const core::DbRef& db,
                                             const Json* body) {
  const Params params(call.query, body);
  AllDocsRequest r = parse_all_docs(params, AllDocsKind::all_docs);
  clamp_to_partition(r, call.partition);
  return std::make_unique<AllDocsListRows>(call, db, std::move(r));
}

MaybeResponse handle_cursors(Call& call) {
  const std::string& view = call.path.at(1);
  const AllDocsKind kind = view == "_design_docs"  ? AllDocsKind::design_docs
                           : view == "_local_docs" ? AllDocsKind::local_docs
                                                   : AllDocsKind::all_docs;
  if (view == "_changes") {
    if (call.path.size() == 2) co_return co_await changes(call, std::nullopt);
    if (call.path.size() != 3) throw HttpError(err::not_found());
    if (call.path[2] == "_meta") co_return co_await changes_meta(call);
    std::int64_t shard = -1;
    const std::string& text = call.path[2];
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), shard);
    if (ec != std::errc() || p != text.data() + text.size() || shard < 0)
      throw HttpError(err::not_found("No such changes shard: " + text));
    co_return co_await changes(call, shard);
  }
  if (call.path.size() == 2) co_return co_await all_docs(call, kind);
  if (call.path.size() == 3 && call.path[2] == "queries")
    co_return co_await all_docs_queries(call, kind);
  throw HttpError(err::not_found());
}

}  // namespace chaise::http
