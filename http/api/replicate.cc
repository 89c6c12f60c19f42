// http/api/replicate.cc — POST /_replicate and GET /_scheduler/{jobs,docs}: the replicator's
// HTTP face (core/replication/scheduler.h runs the jobs). Reference: CouchDB 3.5
// chttpd_misc:handle_replicate_req, couch_replicator_httpd.erl.
#include <boost/asio/use_awaitable.hpp>

#include "core/db/node_reports.h"
#include "core/replication/scheduler.h"
#include "core/security/replicator_docs.h"
#include "http/api/request.h"
#include "http/api/wakeup.h"

namespace chaise::http {

namespace repl = core::replication;

namespace {

// The answer of a one-shot replication, filled on a scheduler thread.
struct Waiter {
  std::mutex mu;
  std::function<void()> resume;
  std::optional<core::Outcome<repl::Json>> result;
  bool ready() const { return result.has_value(); }
};

// chttpd:fix_uri: a source or target that is not an http(s) URL names a database of this server,
// reached at its own URL with the credentials of the request.
void fix_local_endpoint(const Call& call, Json& body, std::string_view side) {
  const auto it = body.find(side);
  if (it == body.end() || !call.ctx.own_url) return;
  Json* url = nullptr;
  if (it->is_string()) {
    url = &*it;
  } else if (it->is_object() && it->contains("url") && (*it)["url"].is_string()) {
    url = &(*it)["url"];
  }
  if (url == nullptr) return;
  const std::string& name = url->get_ref<const std::string&>();
  if (name.starts_with("http://") || name.starts_with("https://")) return;
  std::string cookie;
  if (const auto c = call.req.find(beast_http::field::cookie); c != call.req.end()) {
    const std::string_view all = c->value();
    if (const auto at = all.find("AuthSession="); at != std::string_view::npos) {
      cookie = std::string(all.substr(at, all.find(';', at) - at));
    }
  }
  std::string authorization;
  if (const auto a = call.req.find(beast_http::field::authorization); a != call.req.end())
    authorization = std::string(a->value());
  *it = Json{{"url", call.ctx.own_url() + "/" + quote_plus(name)},
             {"headers", Json{{"authorization", authorization}, {"cookie", cookie}}}};
}

// parse_replication's reasons come as couch_replicator_docs words them for documents
// ({throw,{bad_request,<<"...">>}}); _replicate answers the message inside.
core::CouchError replicate_error(core::CouchError e) {
  std::string& r = e.reason;
  const std::pair<std::string_view, std::string_view> forms[] = {
      {"{throw,{bad_request,<<\"", "\">>}}"}, {"{throw,{bad_request,\"", "\"}}"}};
  for (const auto& [open, close] : forms) {
    if (r.starts_with(open) && r.ends_with(close) && r.size() >= open.size() + close.size()) {
      r = r.substr(open.size(), r.size() - open.size() - close.size());
      return e;
    }
  }
  if (r == "Missing replicator database") return core::CouchError{500, "error", r};
  if (r == "endpoint has an invalid url" || r == "proxy has an invalid url")
    return core::CouchError{400, "invalid_replication", r};
  if (r == "local_endpoints_not_supported") return core::CouchError{500, "error", r};
  return e;
}

MaybeResponse replicate(Call& call) {
  repl::Scheduler& scheduler = *call.ctx.replicator;
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  Json body = parse_json_object_body(call.req);
  fix_local_endpoint(call, body, "source");
  fix_local_endpoint(call, body, "target");
  const bool cancel = body.contains("cancel") && body["cancel"] == true;
  if (cancel) {
    std::string id;
    for (const char* key : {"replication_id", "_local_id", "id"}) {
      if (body.contains(key) && body[key].is_string()) {
        id = body[key].get<std::string>();
        break;
      }
    }
    // repl ids in a URL may have had their '+' read as a space (couch_replicator_ids:convert).
    std::replace(id.begin(), id.end(), ' ', '+');
    std::optional<repl::ReplicationSpec> spec;
    if (id.empty()) {
      auto parsed = repl::parse_replication(body, call.user, scheduler.defaults());
      if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(replicate_error(*e));
      spec = std::move(std::get<repl::ReplicationSpec>(parsed));
    }
    auto r = scheduler.cancel(id, spec, call.user);
    if (auto* e = std::get_if<core::CouchError>(&r)) throw HttpError(*e);
    co_return json_response(call.req, Status::ok, std::get<Json>(r));
  }
  auto parsed = repl::parse_replication(body, call.user, scheduler.defaults());
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(replicate_error(*e));
  repl::ReplicationSpec spec = std::move(std::get<repl::ReplicationSpec>(parsed));
  const bool continuous = spec.continuous;
  auto waiter = std::make_shared<Waiter>();
  scheduler.replicate(std::move(spec), [waiter](core::Outcome<repl::Json> r) {
    std::function<void()> resume;
    {
      std::lock_guard lock(waiter->mu);
      waiter->result = std::move(r);
      resume = std::exchange(waiter->resume, {});
    }
    if (resume) resume();
  });
  co_await async_wait_ready(waiter, boost::asio::use_awaitable);
  auto& result = *waiter->result;
  if (auto* e = std::get_if<core::CouchError>(&result)) throw HttpError(*e);
  co_return json_response(call.req, continuous ? Status::accepted : Status::ok,
                          std::get<Json>(result));
}

std::size_t paging(const Call& call, std::string_view key, std::size_t fallback) {
  const auto v = call.query.get(key);
  if (!v) return fallback;
  const auto n = call.query.get_int(key);
  if (!n) throw HttpError(core::err::query_parse_error(std::string(key) + " must be an integer"));
  if (*n < 0)
    throw HttpError(
        core::err::query_parse_error(std::string(key) + " not in range of [0,infinity]"));
  return static_cast<std::size_t>(*n);
}

// A listed job's id ("" if it has none).
std::string job_id(const Json& job) {
  const auto it = job.find("id");
  return it != job.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The job another server runs for _replicator document `doc` (its running task names it), as
// that server lists the job; nullptr if none does. (value(): another server's entries are read
// without trusting their members.)
const Json* running_elsewhere(const std::vector<core::NodeReport>& others, const Json& doc) {
  const Json database = doc.value("database", Json()), doc_id = doc.value("doc_id", Json());
  for (const core::NodeReport& r : others)
    for (const Json& t : r.tasks) {
      if (t.value("type", "") != "replication" || t.value("database", Json()) != database ||
          t.value("doc_id", Json()) != doc_id)
        continue;
      const Json replication_id = t.value("replication_id", Json());
      for (const Json& j : r.jobs)
        if (job_id(j) == replication_id) return &j;
    }
  return nullptr;
}

// A document of Scheduler::docs pending here because its job runs on another server sharing the
// store (that server holds its lease) shows as that server reports it: running, with its node,
// job id and info.
void show_where_it_runs(const std::vector<core::NodeReport>& others, Json& d) {
  if (d.value("state", "") != "pending") return;
  const Json* job = running_elsewhere(others, d);
  if (job == nullptr) return;
  d["state"] = "running";
  for (const char* key : {"node", "id", "info"}) d[key] = job->value(key, Json());
}

// GET /_scheduler/docs as Scheduler::docs answers it, with show_where_it_runs applied before
// `states` and the paging.
Json docs_of(const Call& call, const std::optional<std::string>& db,
             const std::vector<std::string>& states, std::size_t skip, std::size_t limit) {
  const repl::Scheduler& scheduler = *call.ctx.replicator;
  const std::vector<core::NodeReport> others = other_node_reports(call);
  if (others.empty()) return scheduler.docs(db, states, skip, limit);
  Json all = scheduler.docs(db, {}, 0, std::nullopt);
  Json page = Json::array();
  std::size_t total = 0;
  for (Json& d : all["docs"]) {
    show_where_it_runs(others, d);
    if (!states.empty() &&
        std::find(states.begin(), states.end(), d["state"].get<std::string>()) == states.end())
      continue;
    if (++total <= skip || page.size() >= limit) continue;
    page.push_back(std::move(d));
  }
  return Json{{"total_rows", total}, {"offset", skip}, {"docs", std::move(page)}};
}

Response scheduler_request(Call& call) {
  const repl::Scheduler& scheduler = *call.ctx.replicator;
  if (!is_get(call)) throw_method_not_allowed("GET,HEAD");
  const auto& path = call.path;
  const std::size_t skip = paging(call, "skip", 0);
  const std::size_t limit = paging(call, "limit", 100);
  const auto not_found = [&] { throw HttpError(core::CouchError{404, "not_found", "missing"}); };
  if (path.size() >= 2 && path[1] == "jobs") {
    // This server's jobs, and those the others sharing the store report, ordered by id.
    if (path.size() == 2) {
      const std::vector<core::NodeReport> others = other_node_reports(call);
      if (others.empty()) return json_response(call.req, Status::ok, scheduler.jobs(skip, limit));
      std::vector<Json> all;
      Json own = scheduler.jobs(0, std::nullopt);
      for (Json& j : own["jobs"]) all.push_back(std::move(j));
      for (const core::NodeReport& r : others)
        for (const Json& j : r.jobs) all.push_back(j);
      std::stable_sort(all.begin(), all.end(),
                       [](const Json& a, const Json& b) { return job_id(a) < job_id(b); });
      Json page = Json::array();
      for (std::size_t i = skip; i < all.size() && page.size() < limit; ++i)
        page.push_back(std::move(all[i]));
      return json_response(call.req, Status::ok,
                           Json{{"total_rows", all.size()}, {"offset", skip}, {"jobs", page}});
    }
    if (path.size() > 3) not_found();
    std::string id = path[2];
    std::replace(id.begin(), id.end(), ' ', '+');
    auto r = scheduler.job(id);
    if (auto* e = std::get_if<core::CouchError>(&r)) {
      for (const core::NodeReport& node : other_node_reports(call))
        for (const Json& j : node.jobs)
          if (repl::Scheduler::names_job(job_id(j), id))
            return json_response(call.req, Status::ok, j);
      throw HttpError(*e);
    }
    return json_response(call.req, Status::ok, std::get<Json>(r));
  }
  if (path.size() >= 2 && path[1] == "docs") {
    std::vector<std::string> states;
    if (const auto s = call.query.get("states")) {
      static const std::vector<std::string> kStates = {
          "initializing", "error", "running", "pending", "crashing", "completed", "failed"};
      std::string_view rest = *s;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        std::string state(rest.substr(0, comma));
        if (std::find(kStates.begin(), kStates.end(), state) == kStates.end()) {
          throw HttpError(core::err::query_parse_error(
              "Unknown states [" + state +
              "]. Choose from: [initializing,error,running,pending,crashing,completed,failed]"));
        }
        states.push_back(std::move(state));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
    if (path.size() == 2)
      return json_response(call.req, Status::ok, docs_of(call, std::nullopt, states, skip, limit));
    // The database's name may hold '/' unescaped: /_scheduler/docs/a/b/_replicator[/docid].
    std::size_t end = path.size();
    std::optional<std::string> doc_id;
    std::string db;
    for (std::size_t i = 2; i < path.size(); ++i) {
      if (path[i] == core::kReplicatorDb || path[i].ends_with("_replicator")) {
        for (std::size_t k = 2; k <= i; ++k) db += (k > 2 ? "/" : "") + path[k];
        end = i + 1;
        break;
      }
    }
    if (db.empty()) throw HttpError(core::err::bad_request("Invalid path"));
    if (end < path.size()) {
      if (end + 1 != path.size()) throw HttpError(core::err::bad_request("Invalid path"));
      doc_id = path[end];
    }
    if (!doc_id) return json_response(call.req, Status::ok, docs_of(call, db, states, skip, limit));
    auto r = scheduler.doc(db, *doc_id);
    if (auto* e = std::get_if<core::CouchError>(&r)) throw HttpError(*e);
    Json d = std::get<Json>(std::move(r));
    show_where_it_runs(other_node_reports(call), d);
    return json_response(call.req, Status::ok, std::move(d));
  }
  throw HttpError(core::CouchError{404, "not found", ""});
}

}  // namespace

MaybeResponse handle_replication(Call& call) {
  if (call.ctx.replicator == nullptr) {
    throw HttpError(core::err::not_implemented("this server runs no replicator"));
  }
  if (call.path.front() == "_replicate") co_return co_await replicate(call);
  co_return scheduler_request(call);
}

}  // namespace chaise::http
