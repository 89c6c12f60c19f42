// Design documents at work: /{db}/_design/{ddoc}/_view/{view} (GET, POST, POST .../queries),
// /{db}/_design/{ddoc}/_info, and POST /{db}/_view_cleanup; _update goes to http/api/update.cc.
//
// A view query first brings the index up to date (update=true, the default) in bounded build
// steps, each its own transaction, then streams rows page by page like _all_docs. Parameters and
// their errors follow couch_mrview_http:parse_param and couch_mrview_util:validate_args.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <limits>

#include "core/db/active_tasks.h"
#include "core/docs/purge.h"
#include "core/index/cursors.h"
#include "core/index/filters.h"
#include "core/index/view_index.h"
#include "core/query/collation.h"
#include "http/api/js_request.h"
#include "http/api/metrics.h"
#include "http/api/pages.h"
#include "http/api/render.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"
#include "http/transport/response_stream.h"

namespace chaise::http {

namespace {

using core::OrderedJson;

[[noreturn]] void query_error(const std::string& reason) {
  throw HttpError(err::query_parse_error(reason));
}

enum class UpdateMode { yes, no, lazy };

struct ViewRequest {
  core::ViewQuery q;
  UpdateMode update = UpdateMode::yes;
  bool update_seq = false;
};

// One parameter's value: from a JSON body (already decoded) or the query string (text).
struct Param {
  std::optional<OrderedJson> json;  // body value
  std::optional<std::string> text;  // query-string value
};

bool parse_bool(const Param& p, const std::string& name) {
  if (p.json) {
    if (!p.json->is_boolean()) query_error("Invalid boolean parameter: " + p.json->dump());
    return p.json->get<bool>();
  }
  if (auto b = parse_boolean(*p.text)) return *b;
  (void)name;
  query_error("Invalid boolean parameter: \"" + *p.text + "\"");
}

std::int64_t parse_pos_int(const Param& p) {
  if (p.json) {
    if (!p.json->is_number_integer() || p.json->get<std::int64_t>() < 0)
      query_error("Invalid value for positive integer: \"" + p.json->dump() + "\"");
    return p.json->get<std::int64_t>();
  }
  const std::string& s = *p.text;
  std::int64_t v = 0;
  bool ok = !s.empty() && s.size() <= 18;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  if (ok) v = std::stoll(s);
  if (!ok) query_error("Invalid value for positive integer: \"" + s + "\"");
  return v;
}

OrderedJson parse_json_param(const Param& p) {
  if (p.json) return *p.json;
  return parse_json_or_throw(*p.text);
}

std::string parse_string(const Param& p) {
  if (p.json) return p.json->is_string() ? p.json->get<std::string>() : p.json->dump();
  return *p.text;
}

// couch_mrview_http:parse_params + couch_mrview_util:validate_args for one view.
ViewRequest parse_view_params(const std::vector<std::pair<std::string, Param>>& params,
                              const core::ViewDef& view) {
  ViewRequest r;
  core::ViewQuery& q = r.q;
  std::optional<bool> reduce, group, conflicts;
  std::optional<std::int64_t> group_level, limit;
  bool include_docs = false;
  std::optional<std::vector<OrderedJson>> keys;
  for (const auto& [key, p] : params) {
    if (key == "reduce") {
      reduce = parse_bool(p, key);
    } else if (key == "key") {
      q.start_key = q.end_key = parse_json_param(p);
    } else if (key == "keys") {
      OrderedJson v = parse_json_param(p);
      if (!v.is_array()) query_error("`keys` must be an array of strings.");
      if (v.size() == 1) {
        q.start_key = q.end_key = v[0];
      } else {
        keys = std::vector<OrderedJson>(v.begin(), v.end());
      }
    } else if (key == "startkey" || key == "start_key") {
      q.start_key = parse_json_param(p);
    } else if (key == "endkey" || key == "end_key") {
      q.end_key = parse_json_param(p);
    } else if (key == "startkey_docid" || key == "start_key_doc_id") {
      q.start_docid = parse_string(p);
    } else if (key == "endkey_docid" || key == "end_key_doc_id") {
      q.end_docid = parse_string(p);
    } else if (key == "limit") {
      limit = parse_pos_int(p);
    } else if (key == "skip") {
      q.skip = parse_pos_int(p);
    } else if (key == "stale") {
      const std::string v = parse_string(p);
      if (v == "ok") {
        r.update = UpdateMode::no;
      } else if (v == "update_after") {
        r.update = UpdateMode::lazy;
      } else {
        query_error("Invalid value for `stale`.");
      }
    } else if (key == "stable") {
      const std::string v = parse_string(p);
      if (v != "true" && v != "false") query_error("Invalid value for `stable`.");
    } else if (key == "update") {
      const std::string v = parse_string(p);
      if (v == "true") {
        r.update = UpdateMode::yes;
      } else if (v == "false") {
        r.update = UpdateMode::no;
      } else if (v == "lazy") {
        r.update = UpdateMode::lazy;
      } else {
        query_error("Invalid value for `update`.");
      }
    } else if (key == "descending") {
      q.descending = parse_bool(p, key);
    } else if (key == "group") {
      group = parse_bool(p, key);
    } else if (key == "group_level") {
      group_level = parse_pos_int(p);
    } else if (key == "inclusive_end") {
      q.inclusive_end = parse_bool(p, key);
    } else if (key == "include_docs") {
      include_docs = parse_bool(p, key);
    } else if (key == "update_seq") {
      r.update_seq = parse_bool(p, key);
    } else if (key == "conflicts") {
      conflicts = parse_bool(p, key);
    } else if (key == "attachments") {
      q.attachments = parse_bool(p, key);
    } else if (key == "att_encoding_info") {
      q.att_encoding_info = parse_bool(p, key);
    } else if (key == "sorted") {
      parse_bool(p, key);
    }
  }
  const bool reduce_view = view.reduce.has_value() && reduce.value_or(true);
  if (reduce && *reduce && !view.reduce) query_error("Reduce is invalid for map-only views.");
  // determine_group_level
  std::optional<std::size_t> level;  // nullopt: 0
  if (group && !*group && group_level && *group_level > 0)
    query_error("Can't specify group=false and group_level>0 at the same time");
  bool exact = false;
  if (group_level) {
    level = static_cast<std::size_t>(*group_level);
  } else if (group && *group) {
    exact = true;
  }
  if (reduce_view && !exact && keys)
    query_error("Multi-key fetches for reduce views must use `group=true`");
  if (keys && (q.start_key || q.end_key))
    query_error("`keys` is incompatible with `key`, `start_key` and `end_key`");
  if (!reduce_view && (exact || (level && *level > 0)))
    query_error("Invalid use of grouping on a map view.");
  if (reduce_view && include_docs) query_error("`include_docs` is invalid for reduce");
  if (reduce_view && conflicts) query_error("`conflicts` is invalid for reduce views.");
  q.keys = std::move(keys);
  q.reduce = reduce.value_or(true);
  q.include_docs = include_docs;
  q.conflicts = conflicts.value_or(false);
  if (exact) {
    q.group_level = std::numeric_limits<std::size_t>::max();
  } else if (level && *level > 0) {
    q.group_level = *level;
  }
  q.limit = limit.value_or(-1);
  // A range that cannot hold a row (couch_mrview_util:check_range).
  if (!q.keys && q.start_key && q.end_key) {
    const int c = core::collate(core::collation_key(*q.start_key), core::collation_key(*q.end_key));
    if (!q.descending && c > 0)
      query_error(
          "No rows can match your key range, reverse your start_key and end_key or set "
          "descending=true");
    if (q.descending && c < 0)
      query_error(
          "No rows can match your key range, reverse your start_key and end_key or set "
          "descending=false");
  }
  return r;
}

std::vector<std::pair<std::string, Param>> collect_params(const Call& call, const Json* body) {
  std::vector<std::pair<std::string, Param>> out;
  for (const auto& [k, v] : call.query.params()) out.push_back({k, Param{std::nullopt, v}});
  if (body) {
    for (auto it = body->begin(); it != body->end(); ++it) {
      if (it.key() == "queries") continue;
      OrderedJson v = OrderedJson::parse(it.value().dump());
      out.push_back({it.key(), Param{std::move(v), std::nullopt}});
    }
  }
  return out;
}

// Two queries that build one index at once both map the same batch; the index sequence's
// conflicting read lets one commit and retries the other, which then finds the work done.

std::shared_ptr<const core::ViewGroup> load_group(const Call& call, const core::DbRef& db,
                                                  const std::string& ddoc) {
  auto tr = call.store().create_transaction();
  core::js::DesignDoc d = load_design_doc(tr, db, ddoc);
  auto g = core::ViewGroup::from_design_doc("_design/" + ddoc, d.json, d.key, db.partitioned);
  if (auto* e = std::get_if<core::CouchError>(&g)) throw HttpError(*e);
  return std::make_shared<const core::ViewGroup>(std::get<core::ViewGroup>(std::move(g)));
}

// Writes one view result object (head, rows, tail) through `emit`, page by page.
template <typename Emit>
boost::asio::awaitable<bool> write_view(const Call& call, const core::DbRef& db,
                                        std::shared_ptr<const core::ViewGroup> g,
                                        const ViewRequest& r, Emit&& emit) {
  storage::Database& store = call.store();
  core::ViewCursor cursor(db, g, r.q, call.ctx.js);
  std::string head = "{";
  {
    auto tr = store.create_transaction();
    if (!cursor.reducing()) {
      auto total = value_or_throw(core::view_row_count(tr, db, *g, r.q.view, r.q.partition));
      auto off = value_or_throw(cursor.offset(tr));
      head += "\"total_rows\":" + std::to_string(total) +
              ",\"offset\":" + std::to_string(std::min(off, total)) + ",";
    }
    if (r.update_seq) {
      auto s = value_or_throw(core::view_index_seq(tr, db, *g, storage::Snapshot::yes));
      head += "\"update_seq\":" + core::json_string(s.str()) + ",";
    }
  }
  head += "\"rows\":[\r\n";
  bool started = false;
  RowJoiner joiner;
  std::vector<std::string> rows;
  Pages pages(store);
  for (bool more = true; more;) {
    std::optional<core::CouchError> failure;
    more = pages.read_next(cursor, call.ctx.stream_page_rows, rows, started ? &failure : nullptr);
    if (failure) co_return false;  // cut off mid-stream
    std::string chunk;
    if (!started) {
      started = true;
      chunk = head;
    }
    joiner.append(chunk, rows);
    if (!chunk.empty() && !co_await emit(chunk)) co_return false;
  }
  if (!started && !co_await emit(head)) co_return false;
  co_return co_await emit("\r\n]}");
}

// The view group of `ddoc` and the number of its view `name`, checked for a query as
// couch_mrview_util:validate_args checks them (against CouchDB 3.5).
std::pair<std::shared_ptr<const core::ViewGroup>, std::size_t> queried_view(
    const Call& call, const core::DbRef& db, const std::string& ddoc, const std::string& name) {
  auto g = load_group(call, db, ddoc);
  auto index = g->index_of(name);
  if (!index) throw HttpError(err::not_found("missing_named_view"));
  if (g->language != "javascript")
    throw HttpError(err::bad_request("views in language `" + g->language + "` are not supported"));
  if (g->partitioned && !call.partition)
    query_error("`partition` parameter is mandatory for queries to this view.");
  if (!g->partitioned && call.partition)
    query_error("`partition` parameter is not supported in this design doc");
  return {std::move(g), *index};
}

MaybeResponse view(Call& call, const core::DbRef& db, const std::string& ddoc,
                   const std::string& name, bool queries) {
  require_method(call, queries ? "POST" : "GET,HEAD,POST");
  std::optional<Json> body;
  if (call.is(beast_http::verb::post)) body = parse_json_object_body(call.req);
  auto queried = queried_view(call, db, ddoc, name);
  const std::shared_ptr<const core::ViewGroup> g = std::move(queried.first);
  const std::optional<std::size_t> index = queried.second;

  std::vector<ViewRequest> requests;
  if (queries) {
    if (!body || !body->contains("queries") || !(*body)["queries"].is_array())
      throw HttpError(err::bad_request("`queries` member must be a array."));
    for (const Json& one : (*body)["queries"]) {
      if (!one.is_object()) throw HttpError(err::bad_request("Each query must be a JSON object."));
      std::vector<std::pair<std::string, Param>> params;
      for (auto it = one.begin(); it != one.end(); ++it)
        params.push_back({it.key(), Param{OrderedJson::parse(it.value().dump()), std::nullopt}});
      requests.push_back(parse_view_params(params, g->views[*index]));
      requests.back().q.view = *index;
      requests.back().q.partition = call.partition.value_or("");
    }
  } else {
    requests.push_back(
        parse_view_params(collect_params(call, body ? &*body : nullptr), g->views[*index]));
    requests.back().q.view = *index;
    requests.back().q.partition = call.partition.value_or("");
  }
  bool build_now = false, build_after = false;
  for (const ViewRequest& r : requests) {
    build_now = build_now || r.update == UpdateMode::yes;
    build_after = build_after || r.update == UpdateMode::lazy;
  }
  if (build_now) co_await build_index(call, db, *g);
  if (call.is(beast_http::verb::head)) co_return raw_json_response(call.req, Status::ok, "");

  // The head goes out with the first bytes of the body, so that an error on the first page is
  // still a proper error answer.
  bool begun = false;
  auto emit = [&](std::string_view s) -> boost::asio::awaitable<bool> {
    if (!begun) {
      begun = true;
      if (!co_await call.stream.begin(stream_head(call.req))) co_return false;
    }
    co_return co_await call.stream.write(s);
  };
  if (queries) {
    if (!co_await emit("{\"results\":[\r\n")) co_return std::nullopt;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (i && !co_await emit(",\r\n")) co_return std::nullopt;
      if (!co_await write_view(call, db, g, requests[i], emit)) co_return std::nullopt;
    }
    if (!co_await emit("\r\n]}")) co_return std::nullopt;
  } else if (!co_await write_view(call, db, g, requests[0], emit)) {
    co_return std::nullopt;
  }
  co_await call.stream.write("\n");
  co_await call.stream.finish();
  if (build_after && !build_now) co_await build_index(call, db, *g);
  co_return std::nullopt;
}

// The database's changes index `g` has not taken in yet.
std::int64_t pending_changes(storage::Transaction& tr, const core::DbRef& db,
                             const core::ViewGroup& g) {
  core::ChangesQuery behind;
  behind.since = value_or_throw(core::view_index_seq(tr, db, g, storage::Snapshot::yes));
  core::ChangesCursor cursor(db, std::move(behind));
  return value_or_throw(cursor.pending(tr));
}

MaybeResponse design_info(Call& call, const core::DbRef& db, const std::string& ddoc) {
  require_method(call, "GET,HEAD");
  auto g = load_group(call, db, ddoc);
  auto tr = call.store().create_transaction();
  auto seq = value_or_throw(core::view_index_seq(tr, db, *g, storage::Snapshot::yes));
  // One node holds one copy of every shard, so CouchDB's three counts (over the copies it would
  // read) are the same here.
  const std::int64_t pending = pending_changes(tr, db, *g);
  Json info = Json::object();
  info["name"] = ddoc;
  Json vi = Json::object();
  vi["signature"] = g->signature;
  vi["language"] = g->language;
  // The store's estimate of the index's bytes: there is no file of its own, and its bytes as
  // stored are both what it takes on disk and what is live in it.
  const std::int64_t bytes = value_or_throw(core::view_index_size(tr, db, *g));
  vi["sizes"] = Json{{"file", bytes}, {"external", bytes}, {"active", bytes}};
  vi["update_seq"] = seq.str();
  // The purges the index has taken in: those logged up to its sequence.
  const auto purged = value_or_throw(core::purged_info_at(tr, db, seq));
  vi["purge_seq"] = purged ? purged->purge_seq : 0;
  vi["updater_running"] = value_or_throw(core::view_build_running(tr, db, *g));
  vi["compact_running"] = false;
  vi["waiting_clients"] = 0;
  vi["waiting_commit"] = false;
  vi["updates_pending"] = Json{{"minimum", pending}, {"preferred", pending}, {"total", pending}};
  vi["collator_versions"] = Json::array({core::collation_versions().collator_version});
  info["view_index"] = vi;
  co_return json_response(call.req, Status::ok, info);
}

// A view's rows for a list function.
class ViewListRows final : public ListRows {
 public:
  ViewListRows(const Call& call, const core::DbRef& db, std::shared_ptr<const core::ViewGroup> g,
               const ViewRequest& r)
      : call_(call), pages_(call.store()), cursor_(db, g, r.q, call.ctx.js) {
    head_ = "{";
    auto tr = call.store().create_transaction();
    if (!cursor_.reducing()) {
      auto total = value_or_throw(core::view_row_count(tr, db, *g, r.q.view, r.q.partition));
      auto off = value_or_throw(cursor_.offset(tr));
      head_ += "\"total_rows\":" + std::to_string(total) +
               ",\"offset\":" + std::to_string(std::min(off, total));
    }
    if (r.update_seq) {
      auto s = value_or_throw(core::view_index_seq(tr, db, *g, storage::Snapshot::yes));
      if (head_.size() > 1) head_ += ",";
      head_ += "\"update_seq\":" + core::json_string(s.str());
    }
    head_ += "}";
  }
  const std::string& head() const override { return head_; }
  bool next_page(std::vector<std::string>& rows,
                 std::optional<core::CouchError>& failure) override {
    return pages_.read_next(cursor_, call_.ctx.stream_page_rows, rows, &failure);
  }

 private:
  const Call& call_;
  Pages pages_;
  core::ViewCursor cursor_;
  std::string head_;
};

}  // namespace

boost::asio::awaitable<std::unique_ptr<ListRows>> view_list_rows(const Call& call,
                                                                 const core::DbRef& db,
                                                                 const std::string& ddoc,
                                                                 const std::string& view,
                                                                 const Json* body) {
  auto queried = queried_view(call, db, ddoc, view);
  const std::shared_ptr<const core::ViewGroup> g = std::move(queried.first);
  ViewRequest r = parse_view_params(collect_params(call, body), g->views[queried.second]);
  r.q.view = queried.second;
  r.q.partition = call.partition.value_or("");
  if (r.update != UpdateMode::no) co_await build_index(call, db, *g);
  co_return std::make_unique<ViewListRows>(call, db, g, r);
}

boost::asio::awaitable<void> build_index(const Call& call, const core::DbRef& db,
                                         const core::ViewGroup& g) {
  core::js::Engine& engine = js_engine(call);
  core::ViewIndexBuild build(db, g, engine);
  // A build that ends in an error gives its claim back at once (a server that dies leaves it to
  // lapse); one that caught up cleared it in its last step, or never held it.
  RunAtExit release(call.store(), [&](storage::Transaction& tr) { return build.release(tr); });
  // Shown in _active_tasks from the first step that leaves work for another.
  core::ActiveTasks::Handle task;
  // While another request builds, how long to wait before looking again: short at first (most
  // builds are short), then at most kWaitMax.
  constexpr auto kWaitMin = std::chrono::milliseconds(5), kWaitMax = std::chrono::milliseconds(50);
  auto wait = kWaitMin;
  for (;;) {
    std::optional<core::Outcome<core::BuildStep>> step;
    std::size_t applied = 0;
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto r = build.step(tr, &applied);
          // Every attempt's work, whether it commits or not.
          if (call.ctx.metrics != nullptr) call.ctx.metrics->record_docs_mapped(applied);
          if (!r.ok()) return r.error();
          step = std::move(*r);
          return {};
        });
    ok_or_throw(s);
    if (auto* e = std::get_if<core::CouchError>(&*step)) throw HttpError(*e);
    const core::BuildStep done = std::get<core::BuildStep>(*step);
    if (done == core::BuildStep::caught_up) break;
    if (done == core::BuildStep::wait) {
      boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, wait);
      co_await timer.async_wait(boost::asio::use_awaitable);
      wait = std::min<std::chrono::milliseconds>(2 * wait, kWaitMax);
      continue;
    }
    wait = kWaitMin;
    if (!task && call.ctx.active_tasks != nullptr) {
      auto tr = call.store().create_transaction();
      const std::int64_t left = pending_changes(tr, db, g);
      task = call.ctx.active_tasks->join(
          std::to_string(db.id) + '\0' + g.signature,
          Json{{"type", "indexer"}, {"database", db.name}, {"design_document", g.ddoc_id}},
          left + static_cast<std::int64_t>(applied));
    }
    if (task) task->add_done(static_cast<std::int64_t>(applied));
  }
  release.dismiss();
}

MaybeResponse handle_design_action(Call& call, const core::DbRef& db, const std::string& ddoc,
                                   const std::vector<std::string>& rest) {
  const std::string& action = rest.at(0);
  if (action == "_view" && rest.size() == 2)
    co_return co_await view(call, db, ddoc, rest[1], false);
  if (action == "_view" && rest.size() == 3 && rest[2] == "queries")
    co_return co_await view(call, db, ddoc, rest[1], true);
  if (action == "_info" && rest.size() == 1) co_return co_await design_info(call, db, ddoc);
  if (action == "_show" || action == "_list")
    co_return co_await render_handler(call, db, ddoc, rest);
  if (action == "_update" && (rest.size() == 2 || rest.size() == 3)) {
    std::optional<std::string> id;
    if (rest.size() == 3) id = rest[2];
    co_return co_await update_handler(call, db, ddoc, rest[1], id);
  }
  throw HttpError(err::not_implemented());
}

MaybeResponse view_cleanup(Call& call, const core::DbRef& db) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  std::vector<std::string> keep;
  for (const auto& [id, doc] : read_design_doc_bodies(call, db)) {
    auto g = core::ViewGroup::from_design_doc(id, doc.dump(), "", db.partitioned);
    if (auto* vg = std::get_if<core::ViewGroup>(&g)) keep.push_back(vg->signature);
  }
  for (bool done = false; !done;) {
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto r = core::cleanup_step(tr, db, keep);
          if (!r.ok()) return r.error();
          done = *r;
          return {};
        });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
  }
  co_return json_response(call.req, Status::accepted, Json{{"ok", true}});
}

}  // namespace chaise::http
