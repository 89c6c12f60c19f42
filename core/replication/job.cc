// core/replication/job.cc — see job.h. Reference: CouchDB 3.5 couch_replicator_scheduler_job.erl
// (init, checkpoints, compare_replication_logs), couch_replicator_worker.erl (a batch).
#include "core/replication/job.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/util/digest.h"

namespace chaise::core::replication {
namespace {

using Clock = std::chrono::steady_clock;

// CouchDB keeps this many sessions in a checkpoint's history (?MAX_HISTORY... couch_replicator
// keeps 50).
constexpr std::size_t kMaxHistory = 50;
// The id version the checkpoints say they were written under.
constexpr int kRepIdVersion = 4;

std::string rfc1123_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

std::string random_hex(std::size_t bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string raw(bytes, '\0');
  for (char& c : raw) c = static_cast<char>(rng() & 0xff);
  return hex(raw);
}

bool transient(const CouchError& e) { return e.status == 0 || e.status >= 500 || e.status == 429; }

const Json* member(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// compare_replication_logs/2 and compare_rep_history/2: the sequence to start from and the
// history to continue.
std::pair<Json, Json> start_point(const Json& src_log, const Json& tgt_log) {
  const Json* s_session = member(src_log, "session_id");
  const Json* t_session = member(tgt_log, "session_id");
  const Json none = nullptr;
  if ((s_session ? *s_session : none) == (t_session ? *t_session : none)) {
    const Json* seq = member(src_log, "source_last_seq");
    const Json* hist = member(src_log, "history");
    return {seq ? *seq : Json(0), hist && hist->is_array() ? *hist : Json::array()};
  }
  const Json* sh = member(src_log, "history");
  const Json* th = member(tgt_log, "history");
  if (sh == nullptr || th == nullptr || !sh->is_array() || !th->is_array())
    return {0, Json::array()};
  const auto has_session = [](const Json& id, const Json& hist, std::size_t from) {
    for (std::size_t i = from; i < hist.size(); ++i) {
      const Json* s = member(hist[i], "session_id");
      if (s != nullptr && *s == id) return true;
    }
    return false;
  };
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < sh->size() && j < th->size()) {
    const Json* sid = member((*sh)[i], "session_id");
    if (sid != nullptr && has_session(*sid, *th, j)) {
      const Json* seq = member((*sh)[i], "recorded_seq");
      Json rest = Json::array();
      for (std::size_t k = i + 1; k < sh->size(); ++k) rest.push_back((*sh)[k]);
      return {seq ? *seq : Json(0), rest};
    }
    const Json* tid = member((*th)[j], "session_id");
    if (tid != nullptr && has_session(*tid, *sh, i + 1)) {
      const Json* seq = member((*th)[j], "recorded_seq");
      Json rest = Json::array();
      for (std::size_t k = j + 1; k < th->size(); ++k) rest.push_back((*th)[k]);
      return {seq ? *seq : Json(0), rest};
    }
    ++i;
    ++j;
  }
  return {0, Json::array()};
}

// Whether a revision's attachments (`atts`, metadata without their bytes) include one its
// target lacks: one written
// after the newest of `ancestors` (the target's possible ancestors), or any when there are none.
bool needs_attachment_bytes(const Json& atts, const Json* ancestors) {
  if (!atts.is_object() || atts.empty()) return false;
  std::int64_t newest = 0;
  if (ancestors != nullptr && ancestors->is_array()) {
    for (const Json& a : *ancestors) {
      if (!a.is_string()) continue;
      const std::string& rev = a.get_ref<const std::string&>();
      newest = std::max<std::int64_t>(newest, std::strtoll(rev.c_str(), nullptr, 10));
    }
  }
  for (const auto& [name, att] : atts.items()) {
    const Json* revpos = member(att, "revpos");
    if (revpos == nullptr || !revpos->is_number_integer() || revpos->get<std::int64_t>() > newest)
      return true;
  }
  return false;
}

// The fewest changes a page is split into for the workers (see run()).
constexpr std::size_t kMinPieceRows = 25;

}  // namespace

// What run() shares with its worker threads.
struct ReplicationJob::Run {
  struct Batch {
    std::uint64_t number = 0;
    Json rows;
    Json last_seq;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> queue;  // read, not yet taken by a worker
  struct InFlight {
    Json last_seq;
    bool done = false;  // written, but an older batch is not yet
  };
  std::map<std::uint64_t, InFlight> in_flight;  // queued or being written, by number
  Json through_seq = 0;                         // every change up to it is written
  bool reading_done = false;
  std::optional<CouchError> error;   // the first failure of a worker
  std::vector<Endpoint*> endpoints;  // every endpoint in use, for stop()
};

ReplicationJob::ReplicationJob(ReplicationSpec spec, EndpointFactory& endpoints,
                               std::string server_uuid)
    : spec_(std::move(spec)), endpoints_(endpoints), server_uuid_(std::move(server_uuid)) {
  id_ = early_id(spec_, server_uuid_);
  source_display_ = endpoint_url(spec_.source);
  target_display_ = endpoint_url(spec_.target);
}

ReplicationJob::~ReplicationJob() = default;

ReplicationId ReplicationJob::early_id(const ReplicationSpec& spec, std::string_view server_uuid) {
  return replication_id(spec, server_uuid, std::nullopt);
}

ReplicationId ReplicationJob::id() const {
  std::lock_guard lock(mu_);
  return id_;
}
std::string ReplicationJob::source_display() const { return source_display_; }
std::string ReplicationJob::target_display() const { return target_display_; }

JobStats ReplicationJob::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void ReplicationJob::stop() {
  stopping_ = true;
  std::lock_guard lock(mu_);
  if (run_ != nullptr) {
    std::lock_guard run_lock(run_->mu);
    for (Endpoint* e : run_->endpoints) e->cancel();
    run_->cv.notify_all();
  }
}

JobOutcome ReplicationJob::run() {
  JobOutcome out;
  Run run;
  // Every endpoint the run opens. Declared before `detach`, so that they are destroyed after
  // stop() can no longer reach them through run_.
  std::vector<std::unique_ptr<Endpoint>> owned;
  {
    std::lock_guard lock(mu_);
    run_ = &run;
  }
  struct Detach {
    ReplicationJob* job;
    ~Detach() {
      std::lock_guard lock(job->mu_);
      job->run_ = nullptr;
    }
  } detach{this};

  const EndpointFactory::Options eo{spec_.connection_timeout_ms, spec_.http_connections};
  const auto fail = [&](std::string reason, bool permanent) {
    out.ok = false;
    out.reason = std::move(reason);
    out.permanent = permanent;
    return out;
  };
  const auto open = [&](const Json& which) -> Outcome<Endpoint*> {
    auto e = endpoints_.open(which, eo);
    if (auto* err = std::get_if<CouchError>(&e)) return *err;
    Endpoint* ep = std::get<std::unique_ptr<Endpoint>>(e).get();
    std::lock_guard lock(run.mu);
    owned.push_back(std::move(std::get<std::unique_ptr<Endpoint>>(e)));
    run.endpoints.push_back(ep);
    if (stopping_) ep->cancel();
    return ep;
  };
  // Calls `f` until it succeeds, fails for good, or retries_per_request transient failures
  // passed (0.25 s, doubling, between them, as couch_replicator_httpc waits).
  const auto retrying = [&](auto&& f) {
    auto r = f();
    std::chrono::milliseconds wait{250};
    for (int attempt = 0; attempt < spec_.retries_per_request && !stopping_; ++attempt) {
      auto* e = std::get_if<CouchError>(&r);
      if (e == nullptr || !transient(*e)) break;
      std::this_thread::sleep_for(wait);
      wait = std::min(wait * 2, std::chrono::milliseconds(10'000));
      r = f();
    }
    return r;
  };
  const auto reason_of = [](const CouchError& e) {
    if (e.status == 0) return e.reason;
    return e.error + ": " + e.reason;
  };

  auto src_open = open(spec_.source);
  if (auto* e = std::get_if<CouchError>(&src_open)) return fail(e->reason, true);
  auto tgt_open = open(spec_.target);
  if (auto* e = std::get_if<CouchError>(&tgt_open)) return fail(e->reason, true);
  Endpoint& src = *std::get<Endpoint*>(src_open);
  Endpoint& tgt = *std::get<Endpoint*>(tgt_open);

  // Why a database cannot be used, as CouchDB words it: a 401 is "unauthorized", a 403
  // "forbidden" (couch_replicator_api_wrap:db_open).
  const auto refused = [&](const CouchError& e, const std::string& display) {
    if (e.status == 404) return fail("db_not_found: could not open " + display, true);
    if (e.status == 401)
      return fail("unauthorized: unauthorized to access or create database " + display, true);
    if (e.status == 403) return fail("forbidden: " + display, true);
    return fail(reason_of(e), false);
  };
  auto src_info = retrying([&] { return src.info(); });
  if (auto* e = std::get_if<CouchError>(&src_info)) return refused(*e, source_display_);
  auto tgt_info = retrying([&] { return tgt.info(); });
  if (auto* e = std::get_if<CouchError>(&tgt_info);
      e != nullptr && e->status == 404 && spec_.create_target) {
    auto created = retrying([&] { return tgt.create(spec_.create_target_params); });
    // 412: another job created it meanwhile.
    if (auto* ce = std::get_if<CouchError>(&created); ce != nullptr && ce->status != 412)
      return refused(*ce, target_display_);
    tgt_info = retrying([&] { return tgt.info(); });
  }
  if (auto* e = std::get_if<CouchError>(&tgt_info)) return refused(*e, target_display_);

  // A design-document filter's code enters the replication id.
  std::optional<std::string> filter_code;
  if (!spec_.filter.empty() && !spec_.filter.starts_with('_')) {
    const auto slash = spec_.filter.find('/');
    const std::string ddoc = "_design/" + spec_.filter.substr(0, slash);
    const std::string name = spec_.filter.substr(slash + 1);
    auto doc = retrying([&] { return src.get_doc(ddoc); });
    const Json* code = nullptr;
    if (auto* d = std::get_if<Json>(&doc)) {
      if (const Json* filters = member(*d, "filters")) code = member(*filters, name);
    }
    if (code == nullptr || !code->is_string()) {
      out.undefined = true;
      return fail("filter_fetch_error: Couldn't open document `" + ddoc +
                      "` from source database `" + source_display_ + "`",
                  true);
    }
    filter_code = code->get<std::string>();
  }
  const ReplicationId rid = replication_id(spec_, server_uuid_, filter_code);
  {
    std::lock_guard lock(mu_);
    id_ = rid;
  }
  const std::string checkpoint_id = rid.base;

  // Where to start.
  Json src_log = Json::object();
  Json tgt_log = Json::object();
  Json start_seq = 0;
  Json history = Json::array();
  {
    auto s = retrying([&] { return src.get_local(checkpoint_id); });
    if (auto* e = std::get_if<CouchError>(&s)) return fail(reason_of(*e), false);
    auto t = retrying([&] { return tgt.get_local(checkpoint_id); });
    if (auto* e = std::get_if<CouchError>(&t)) return fail(reason_of(*e), false);
    if (auto& v = std::get<std::optional<Json>>(s)) src_log = *v;
    if (auto& v = std::get<std::optional<Json>>(t)) tgt_log = *v;
    std::tie(start_seq, history) = start_point(src_log, tgt_log);
  }
  // The counters go on from the last session's (CouchDB's stats are cumulative over sessions).
  if (!history.empty()) {
    const Json& last = history.front();
    const auto carried = [&](std::string_view key) {
      const Json* v = member(last, key);
      return v != nullptr && v->is_number_integer() ? v->get<std::int64_t>() : 0;
    };
    std::lock_guard lock(mu_);
    stats_.revisions_checked = carried("missing_checked");
    stats_.missing_revisions_found = carried("missing_found");
    stats_.docs_read = carried("docs_read");
    stats_.docs_written = carried("docs_written");
    stats_.doc_write_failures = carried("doc_write_failures");
  }
  if (spec_.since_seq) start_seq = *spec_.since_seq;
  const std::string session_id = random_hex(16);
  const std::string start_time = rfc1123_now();
  {
    std::lock_guard lock(mu_);
    stats_.checkpointed_source_seq = start_seq;
    stats_.source_seq = std::get<Json>(src_info).value("update_seq", Json(0));
    stats_.through_seq = start_seq;
  }
  run.through_seq = start_seq;

  // ---- checkpoints ----
  Json committed_seq = start_seq;
  const auto checkpoint = [&](const Json& seq) -> std::optional<CouchError> {
    if (!spec_.use_checkpoints || seq == committed_seq) return std::nullopt;
    (void)retrying([&] { return tgt.ensure_full_commit(); });
    const JobStats st = stats();
    Json entry = {{"session_id", session_id},
                  {"start_time", start_time},
                  {"end_time", rfc1123_now()},
                  {"start_last_seq", start_seq},
                  {"end_last_seq", seq},
                  {"recorded_seq", seq},
                  {"missing_checked", st.revisions_checked},
                  {"missing_found", st.missing_revisions_found},
                  {"docs_read", st.docs_read},
                  {"docs_written", st.docs_written},
                  {"doc_write_failures", st.doc_write_failures},
                  {"bulk_get_docs", st.docs_read},
                  {"bulk_get_attempts", st.docs_read}};
    Json new_history = Json::array({entry});
    for (const Json& h : history) {
      if (new_history.size() >= kMaxHistory) break;
      new_history.push_back(h);
    }
    Json body = {{"session_id", session_id},
                 {"source_last_seq", seq},
                 {"replication_id_version", kRepIdVersion}};
    if (spec_.doc_ids) {
      body["doc_ids"] = *spec_.doc_ids;
      body["start_time"] = start_time;
      body["end_time"] = entry["end_time"];
      body["docs_read"] = st.docs_read;
      body["docs_written"] = st.docs_written;
      body["doc_write_failures"] = st.doc_write_failures;
    }
    body["history"] = new_history;
    for (auto* side : {&src_log, &tgt_log}) {
      Endpoint& ep = side == &src_log ? src : tgt;
      Json doc = body;
      if (const Json* rev = member(*side, "_rev")) doc["_rev"] = *rev;
      auto put = retrying([&] { return ep.put_local(checkpoint_id, doc); });
      if (auto* e = std::get_if<CouchError>(&put)) {
        // A source the job may not write to keeps no checkpoint there (CouchDB fails the
        // checkpoint; then the next start compares against the target's alone).
        if (side == &src_log && (e->status == 401 || e->status == 403)) continue;
        return *e;
      }
      Json& ok = std::get<Json>(put);
      doc["_rev"] = ok.value("rev", Json(nullptr));
      *side = std::move(doc);
    }
    history = std::move(new_history);
    committed_seq = seq;
    std::lock_guard lock(mu_);
    stats_.checkpointed_source_seq = seq;
    return std::nullopt;
  };

  // ---- workers: revs_diff, bulk_get, bulk_docs of one batch ----
  const auto process = [&](Endpoint& wsrc, Endpoint& wtgt,
                           const Json& rows) -> std::optional<CouchError> {
    Json id_revs = Json::object();
    std::int64_t checked = 0;
    for (const Json& row : rows) {
      const Json* id = member(row, "id");
      const Json* changes = member(row, "changes");
      if (id == nullptr || !id->is_string() || changes == nullptr || !changes->is_array()) continue;
      Json& revs = id_revs[id->get<std::string>()];
      if (revs.is_null()) revs = Json::array();
      for (const Json& c : *changes)
        if (const Json* rev = member(c, "rev")) {
          revs.push_back(*rev);
          ++checked;
        }
    }
    {
      std::lock_guard lock(mu_);
      stats_.revisions_checked += checked;
    }
    if (id_revs.empty()) return std::nullopt;
    auto diff = retrying([&] { return wtgt.revs_diff(id_revs); });
    if (auto* e = std::get_if<CouchError>(&diff)) return *e;
    Json wanted = Json::array();
    for (auto it = std::get<Json>(diff).begin(); it != std::get<Json>(diff).end(); ++it) {
      const Json* missing = member(it.value(), "missing");
      if (missing == nullptr || !missing->is_array()) continue;
      const Json* ancestors = member(it.value(), "possible_ancestors");
      for (const Json& rev : *missing) {
        Json entry = {{"id", it.key()}, {"rev", rev}};
        if (ancestors != nullptr && ancestors->is_array() && !ancestors->empty())
          entry["atts_since"] = *ancestors;
        wanted.push_back(std::move(entry));
      }
    }
    {
      std::lock_guard lock(mu_);
      stats_.missing_revisions_found += static_cast<std::int64_t>(wanted.size());
    }
    if (wanted.empty()) return std::nullopt;
    auto fetched = retrying([&] { return wsrc.bulk_get(wanted, spec_.use_bulk_get); });
    if (auto* e = std::get_if<CouchError>(&fetched)) return *e;
    // The attachments each wanted revision's target already has: those of its possible
    // ancestors (atts_since).
    std::map<std::pair<std::string, std::string>, const Json*> since;
    for (const Json& w : wanted) {
      if (const Json* a = member(w, "atts_since"))
        since[{w["id"].get<std::string>(), w["rev"].dump()}] = a;
    }
    Json docs = Json::array();
    // Revisions whose attachment bytes must travel: (the revision as _bulk_get gave it, without
    // those bytes; its atts_since).
    std::vector<std::pair<Json, Json>> with_bytes;
    for (const Json& result : std::get<Json>(fetched)) {
      const Json* list = member(result, "docs");
      if (list == nullptr || !list->is_array()) continue;
      for (const Json& d : *list) {
        const Json* ok = member(d, "ok");
        if (ok == nullptr) continue;
        const Json* id = member(*ok, "_id");
        const Json* rev = member(*ok, "_rev");
        const Json* atts = member(*ok, "_attachments");
        const auto s = id != nullptr && rev != nullptr && id->is_string()
                           ? since.find({id->get<std::string>(), rev->dump()})
                           : since.end();
        const Json* ancestors = s == since.end() ? nullptr : s->second;
        if (atts != nullptr && needs_attachment_bytes(*atts, ancestors)) {
          with_bytes.emplace_back(*ok, ancestors != nullptr ? *ancestors : Json::array());
        } else {
          docs.push_back(*ok);
        }
      }
    }
    const auto read = static_cast<std::int64_t>(docs.size());
    {
      std::lock_guard lock(mu_);
      stats_.docs_read += read;
    }
    // Revisions with attachment bytes to carry go one at a time, each streamed from the source
    // into the target as one multipart body (CouchDB's replicator PUTs them the same way), so
    // memory stays flat whatever their size.
    for (const auto& [revision, ancestors] : with_bytes) {
      const std::string id = revision["_id"].get<std::string>();
      const bool multipart = wtgt.takes_encoded_multipart();
      auto put = retrying([&]() -> Outcome<Json> {
        if (stopping_) return CouchError{0, "stopped", "stopped"};
        auto body = wsrc.open_doc_with_attachments(id, revision["_rev"], ancestors, multipart);
        if (auto* e = std::get_if<CouchError>(&body)) return *e;
        return wtgt.put_replicated(id, *std::get<std::unique_ptr<Endpoint::BodyReader>>(body));
      });
      std::lock_guard lock(mu_);
      if (auto* e = std::get_if<CouchError>(&put)) {
        if (e->status == 404) continue;  // gone from the source since (compacted or purged)
        ++stats_.docs_read;
        // What the target refuses is counted and skipped (couch_replicator_worker).
        if (e->status == 400 || e->status == 401 || e->status == 403 || e->status == 413 ||
            e->status == 415) {
          ++stats_.doc_write_failures;
          continue;
        }
        return *e;
      }
      ++stats_.docs_read;
      ++stats_.docs_written;
    }
    if (docs.empty()) return std::nullopt;
    auto written = retrying([&] { return wtgt.bulk_docs(docs); });
    if (auto* e = std::get_if<CouchError>(&written)) return *e;
    std::int64_t failures = 0;
    for (const Json& r : std::get<Json>(written))
      if (member(r, "error") != nullptr) ++failures;
    std::lock_guard lock(mu_);
    stats_.docs_written += read - failures;
    stats_.doc_write_failures += failures;
    return std::nullopt;
  };

  const int nworkers = std::max(1, std::min(spec_.worker_processes, 64));
  std::vector<std::thread> workers;
  std::vector<Endpoint*> worker_eps;
  std::optional<std::string> open_error;
  for (int w = 0; w < nworkers; ++w) {
    auto ws = open(spec_.source);
    auto wt = open(spec_.target);
    if (std::holds_alternative<CouchError>(ws) || std::holds_alternative<CouchError>(wt)) {
      open_error = "cannot open the endpoints of a worker";
      break;
    }
    worker_eps.push_back(std::get<Endpoint*>(ws));
    worker_eps.push_back(std::get<Endpoint*>(wt));
  }
  if (open_error) return fail(*open_error, false);
  // Marks batch `number` written and advances through_seq over the batches done in order.
  const auto finished = [&](std::uint64_t number) {
    // Caller holds run.mu.
    const auto it = run.in_flight.find(number);
    if (it != run.in_flight.end()) it->second.done = true;
    while (!run.in_flight.empty() && run.in_flight.begin()->second.done) {
      run.through_seq = run.in_flight.begin()->second.last_seq;
      run.in_flight.erase(run.in_flight.begin());
    }
    run.cv.notify_all();
  };
  for (int w = 0; w < nworkers; ++w) {
    workers.emplace_back([&, w] {
      Endpoint& ws = *worker_eps[2 * w];
      Endpoint& wt = *worker_eps[2 * w + 1];
      for (;;) {
        Run::Batch batch;
        {
          std::unique_lock lock(run.mu);
          run.cv.wait(lock, [&] {
            return !run.queue.empty() || run.reading_done || run.error || stopping_;
          });
          if (run.error || stopping_ || run.queue.empty()) return;
          batch = std::move(run.queue.front());
          run.queue.pop_front();
          run.cv.notify_all();
        }
        auto e = process(ws, wt, batch.rows);
        std::lock_guard lock(run.mu);
        if (e) {
          if (!run.error) run.error = *e;
          run.cv.notify_all();
          return;
        }
        finished(batch.number);
      }
    });
  }

  // ---- the changes reader (this thread) ----
  Json since = start_seq;
  std::uint64_t next_number = 0;
  auto last_checkpoint = Clock::now();
  std::optional<CouchError> failure;
  bool caught_up = false;
  bool no_changes = true;
  while (!stopping_) {
    ChangesQuery q;
    q.since = since;
    q.limit = static_cast<std::size_t>(std::max(1, spec_.worker_batch_size));
    q.filter = spec_.filter;
    q.query_params = spec_.query_params;
    q.doc_ids = spec_.doc_ids;
    q.selector = spec_.selector;
    if (spec_.doc_ids) q.filter = "_doc_ids";
    if (spec_.selector) q.filter = "_selector";
    q.longpoll = spec_.continuous && caught_up;
    // A caught-up continuous job checkpoints when its longpoll returns: at least every
    // checkpoint_interval (1 s at the soonest), at most every 10 s as CouchDB's changes timeout.
    q.timeout_ms = std::clamp<std::int64_t>(spec_.checkpoint_interval_ms, 1'000, 10'000);
    auto ch = retrying([&] { return src.changes(q); });
    if (auto* e = std::get_if<CouchError>(&ch)) {
      failure = *e;
      break;
    }
    Json& answer = std::get<Json>(ch);
    const Json* results = member(answer, "results");
    const Json* last_seq = member(answer, "last_seq");
    if (results == nullptr || !results->is_array() || last_seq == nullptr) {
      failure = CouchError{0, "changes_reader_died", "malformed _changes answer from the source"};
      break;
    }
    {
      std::lock_guard lock(mu_);
      if (const Json* pending = member(answer, "pending"); pending && pending->is_number_integer())
        stats_.changes_pending = pending->get<std::int64_t>();
      stats_.source_seq = *last_seq;
    }
    if (!results->empty()) {
      no_changes = false;
      // The page goes to the workers in up to nworkers pieces (of kMinPieceRows at least), so
      // that a page that is all there is (a small source, large attachments) still keeps every
      // worker busy. A piece ends at its last row's seq; the last one at the page's last_seq.
      const std::size_t n = results->size();
      const std::size_t piece = std::max<std::size_t>(
          kMinPieceRows, (n + static_cast<std::size_t>(nworkers) - 1) / nworkers);
      bool stop_reading = false;
      for (std::size_t at = 0; at < n;) {
        std::size_t end = std::min(n, at + piece);
        Json piece_seq = *last_seq;
        const Json* seq = end < n ? member((*results)[end - 1], "seq") : nullptr;
        if (seq != nullptr) {
          piece_seq = *seq;
        } else {
          end = n;  // no seq to checkpoint at: the rest of the page is one piece
        }
        Json rows(results->begin() + static_cast<std::ptrdiff_t>(at),
                  results->begin() + static_cast<std::ptrdiff_t>(end));
        at = end;
        std::unique_lock lock(run.mu);
        // At most one piece waits per worker: memory stays bounded by the batch size.
        run.cv.wait(lock, [&] {
          return run.queue.size() < static_cast<std::size_t>(nworkers) || run.error || stopping_;
        });
        if (run.error || stopping_) {
          stop_reading = true;
          break;
        }
        run.in_flight[next_number] = Run::InFlight{piece_seq};
        run.queue.push_back(Run::Batch{next_number, std::move(rows), piece_seq});
        ++next_number;
        run.cv.notify_all();
      }
      if (stop_reading) break;
    }
    since = *last_seq;
    const bool drained = results->size() < q.limit;
    if (drained && !spec_.continuous) break;
    caught_up = drained;
    if (spec_.continuous && drained && results->empty()) {
      // Nothing in flight from this read: what was read before is what the checkpoint covers.
      std::lock_guard lock(run.mu);
      if (run.in_flight.empty()) run.through_seq = since;
    }
    Json through;
    {
      std::lock_guard lock(run.mu);
      through = run.through_seq;
    }
    {
      std::lock_guard lock(mu_);
      stats_.through_seq = through;
    }
    if (Clock::now() - last_checkpoint >= std::chrono::milliseconds(spec_.checkpoint_interval_ms)) {
      if (auto e = checkpoint(through)) {
        failure = *e;
        break;
      }
      last_checkpoint = Clock::now();
    }
  }
  {
    std::unique_lock lock(run.mu);
    run.reading_done = true;
    run.cv.notify_all();
  }
  for (auto& t : workers) t.join();
  std::optional<CouchError> worker_error;
  Json through;
  {
    std::lock_guard lock(run.mu);
    worker_error = run.error;
    through = run.through_seq;
    if (!failure && !worker_error && !stopping_ && run.in_flight.empty()) through = since;
  }
  {
    std::lock_guard lock(mu_);
    stats_.through_seq = through;
  }
  // What is written is checkpointed, whatever ended the run.
  const auto last = checkpoint(through);
  if (failure) return fail(reason_of(*failure), false);
  if (worker_error) return fail(reason_of(*worker_error), false);
  if (last) return fail(reason_of(*last), false);
  if (stopping_) return fail("stopped", false);

  out.ok = true;
  out.result = Json::object();
  out.result["ok"] = true;
  if (no_changes) {
    // CouchDB answers the source's checkpoint as it stands.
    out.result["no_changes"] = true;
    for (auto it = src_log.begin(); it != src_log.end(); ++it)
      if (!it.key().starts_with('_')) out.result[it.key()] = it.value();
    return out;
  }
  if (!spec_.use_checkpoints) {
    out.result["use_checkpoints"] = false;
    return out;
  }
  out.result["session_id"] = session_id;
  out.result["source_last_seq"] = through;
  out.result["replication_id_version"] = kRepIdVersion;
  if (spec_.doc_ids) {
    const JobStats st = stats();
    out.result["start_time"] = start_time;
    out.result["end_time"] = rfc1123_now();
    out.result["docs_read"] = st.docs_read;
    out.result["docs_written"] = st.docs_written;
    out.result["doc_write_failures"] = st.doc_write_failures;
  }
  out.result["history"] = history;
  return out;
}

}  // namespace chaise::core::replication
