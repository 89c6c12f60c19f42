// core/replication/scheduler.cc — see scheduler.h. Reference: CouchDB 3.5
// couch_replicator_scheduler.erl (states, backoff, history), couch_replicator_doc_processor.erl
// (documents), couch_replicator_docs.erl (what is written back), couch_replicator_httpd.erl.
#include "core/replication/scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "core/replication/job.h"

namespace chaise::core::replication {
namespace {

using Clock = std::chrono::steady_clock;

std::string iso_time(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
std::string iso_now() { return iso_time(std::time(nullptr)); }

std::optional<std::time_t> parse_iso_time(const std::string& text) {
  std::tm tm{};
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) == nullptr) return std::nullopt;
  return timegm(&tm);
}

// seq_encode: a sequence as text (a string as it is, anything else as its JSON).
std::string seq_text(const Json& seq) {
  return seq.is_string() ? seq.get<std::string>() : seq.dump();
}

}  // namespace

struct Scheduler::State {
  enum class JobState { pending, running, crashing };

  struct Entry {
    std::string id;  // the full replication id, as known when the job was added
    ReplicationSpec spec;
    std::shared_ptr<ReplicationJob> job;
    std::thread thread;
    JobState state = JobState::pending;
    bool thread_done = false;  // run() returned; `outcome` holds its result
    bool removing = false;     // stop() was called: drop the job once its thread ends
    bool rotating = false;     // stopped to let a waiting job run: pending once its thread ends
    Clock::time_point lease_renew_at{};  // running: when its lease is written again
    Clock::time_point lease_retry_at{};  // pending: when to ask for its lease again
    std::optional<JobOutcome> outcome;
    std::deque<Json> history;  // newest first
    int failures = 0;
    std::string last_error;
    Clock::time_point retry_at{};
    Clock::time_point last_started{};  // the epoch until it first runs
    std::optional<Done> done;          // a one-shot POST /_replicate waiting for the end
    std::time_t start_time = std::time(nullptr);
    std::time_t started_on = 0;
    std::uint64_t number = 0;  // the order jobs were added in
  };

  // What _scheduler/docs says about a _replicator document.
  struct DocEntry {
    std::string db;
    std::string doc_id;
    std::string job_id;  // "" before a job was made
    std::string state;   // initializing, running, pending, crashing, completed, failed, error
    std::optional<std::string> error;
    Json info = nullptr;
    std::string source;
    std::string target;
    std::optional<std::string> user;
    std::time_t start_time = std::time(nullptr);
    std::time_t last_updated = std::time(nullptr);
    int error_count = 0;
    // In "error": the replication to define again, when, and how many tries failed so far.
    std::optional<ReplicationSpec> spec;
    Clock::time_point retry_at{};
    int define_errors = 0;
  };

  EndpointFactory& endpoints;
  SchedulerOptions options;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool started = false;
  std::map<std::string, std::unique_ptr<Entry>> jobs;  // by id
  std::map<std::pair<std::string, std::string>, DocEntry> docs;
  std::set<std::pair<std::string, std::string>> error_docs;  // the keys of docs in "error"
  std::mt19937_64 random{std::random_device{}()};
  std::deque<Json> doc_events;  // _replicator changes rows not yet handled
  std::uint64_t next_number = 0;
  bool changed = false;  // a job was added or removed: the scheduler thread looks again
  std::thread scheduler_thread;
  std::thread watcher_thread;
  std::unique_ptr<Endpoint> watcher_endpoint;  // guarded by mu (for cancel at stop)
  std::unique_ptr<Endpoint> writer_endpoint;   // used by the scheduler thread only
  // Leases other servers hold, by document id: the revision last seen and when it was first
  // seen (scheduler thread).
  std::map<std::string, std::pair<std::string, Clock::time_point>> leases_seen;

  State(EndpointFactory& e, SchedulerOptions o) : endpoints(e), options(std::move(o)) {}

  void add_history(Entry& e, std::string type, std::optional<std::string> reason = std::nullopt) {
    Json h = {{"timestamp", iso_now()}, {"type", std::move(type)}};
    if (reason) h["reason"] = *reason;
    e.history.push_front(std::move(h));
    while (e.history.size() > static_cast<std::size_t>(std::max(1, options.max_history)))
      e.history.pop_back();
  }

  static std::string state_name(JobState s) {
    switch (s) {
      case JobState::pending:
        return "pending";
      case JobState::running:
        return "running";
      case JobState::crashing:
        return "crashing";
    }
    return "pending";
  }

  Json info_of(const Entry& e) const {
    if (e.state == JobState::crashing || (e.state == JobState::pending && !e.last_error.empty()))
      return Json{{"error", e.last_error}};
    const JobStats st = e.job->stats();
    Json info = {
        {"revisions_checked", st.revisions_checked},
        {"missing_revisions_found", st.missing_revisions_found},
        {"docs_read", st.docs_read},
        {"docs_written", st.docs_written},
        {"changes_pending", st.changes_pending ? Json(*st.changes_pending) : Json(nullptr)},
        {"doc_write_failures", st.doc_write_failures},
        {"bulk_get_docs", st.docs_read},
        {"bulk_get_attempts", st.docs_read},
        {"checkpointed_source_seq", st.checkpointed_source_seq},
        {"source_seq", st.source_seq},
        {"through_seq", st.through_seq}};
    return info;
  }

  Json job_json(const Entry& e) const {
    Json j = Json::object();
    j["database"] = e.spec.db_name.empty() ? Json(nullptr) : Json(e.spec.db_name);
    j["id"] = e.job->id().full;
    j["pid"] = e.state == JobState::running ? Json("<0." + std::to_string(e.number) + ".0>")
                                            : Json(nullptr);
    j["source"] = e.job->source_display();
    j["target"] = e.job->target_display();
    j["user"] = e.spec.user.name ? Json(*e.spec.user.name) : Json(nullptr);
    j["doc_id"] = e.spec.doc_id.empty() ? Json(nullptr) : Json(e.spec.doc_id);
    j["info"] = info_of(e);
    j["history"] = Json::array();
    for (const Json& h : e.history) j["history"].push_back(h);
    j["node"] = options.node;
    j["start_time"] = iso_time(e.start_time);
    return j;
  }

  // Adds a job (mu held). Returns the entry, or nullptr when one with this id exists.
  Entry* add_job(ReplicationSpec spec, std::optional<Done> done) {
    auto job = std::make_shared<ReplicationJob>(spec, endpoints, options.server_uuid);
    const std::string id = job->id().full;
    if (jobs.count(id) != 0) return nullptr;
    auto e = std::make_unique<Entry>();
    e->id = id;
    e->spec = std::move(spec);
    e->job = std::move(job);
    e->done = std::move(done);
    e->number = ++next_number;
    add_history(*e, "added");
    Entry* raw = e.get();
    jobs.emplace(id, std::move(e));
    changed = true;
    cv.notify_all();
    return raw;
  }

  bool leases() const { return !options.lease_owner.empty() && writer_endpoint != nullptr; }
  static std::string lease_id(const std::string& doc_id) { return "replication-lease:" + doc_id; }
  Clock::duration lease_time() const { return std::chrono::milliseconds(options.lease_ms); }
  // How often a holder writes its lease again, and a refused taker asks again: a third of a lease.
  Clock::duration lease_period() const { return lease_time() / 3; }

  // Takes, or writes again, the lease of a _replicator document's job (mu held): false when
  // another server holds it, or when the store cannot tell. Jobs of POST /_replicate need none.
  bool hold_lease(Entry& e) {
    if (!leases() || e.spec.db_name.empty()) return true;
    const std::string id = lease_id(e.spec.doc_id);
    const auto now = Clock::now();
    auto got = writer_endpoint->get_local(id);
    if (std::holds_alternative<CouchError>(got)) return false;
    const std::optional<Json>& current = std::get<std::optional<Json>>(got);
    Json next = current ? *current : Json::object();
    const std::string owner = current ? current->value("owner", "") : "";
    if (!owner.empty() && owner != options.lease_owner) {
      // Another server's: it is alive as long as it keeps writing the lease.
      const std::string rev = current->value("_rev", "");
      auto& seen = leases_seen[e.spec.doc_id];
      if (seen.first != rev) seen = {rev, now};
      if (now - seen.second < lease_time()) return false;
    }
    next["owner"] = options.lease_owner;
    next["written"] = iso_now();
    if (!write_lease(id, current, std::move(next))) return false;
    leases_seen.erase(e.spec.doc_id);
    e.lease_renew_at = now + lease_period();
    return true;
  }

  // Gives the lease of a job that ends up, so that another server need not wait (mu held).
  void release_lease(const Entry& e) {
    if (!leases() || e.spec.db_name.empty()) return;
    const std::string id = lease_id(e.spec.doc_id);
    auto got = writer_endpoint->get_local(id);
    const auto* current = std::get_if<std::optional<Json>>(&got);
    if (current == nullptr || !*current || (**current).value("owner", "") != options.lease_owner)
      return;
    Json next = **current;
    next["owner"] = "";
    write_lease(id, *current, std::move(next));
  }

  // Writes lease `id` as `next`, if it is still `current` as read (with put_local_if when given).
  bool write_lease(const std::string& id, const std::optional<Json>& current, Json next) {
    if (!options.put_local_if)
      return !std::holds_alternative<CouchError>(writer_endpoint->put_local(id, next));
    std::optional<std::string> rev;
    if (current && current->contains("_rev") && (*current)["_rev"].is_string())
      rev = (*current)["_rev"].get<std::string>();
    next.erase("_id");
    next.erase("_rev");
    const Outcome<bool> put = options.put_local_if(id, rev, next);
    const bool* written = std::get_if<bool>(&put);
    return written != nullptr && *written;
  }

  // Writes again the leases of running jobs that are due; a job whose lease another server took
  // meanwhile stops and waits (mu held).
  void renew_leases() {
    if (!leases()) return;
    const auto now = Clock::now();
    for (auto& [id, e] : jobs) {
      if (e->state != JobState::running || e->removing || e->rotating || e->spec.db_name.empty() ||
          e->lease_renew_at > now)
        continue;
      if (!hold_lease(*e)) {
        e->rotating = true;
        e->lease_retry_at = now + lease_period();
        e->job->stop();
      }
    }
  }

  void launch(Entry& e) {
    e.state = JobState::running;
    e.thread_done = false;
    e.outcome.reset();
    e.started_on = std::time(nullptr);
    e.last_started = Clock::now();
    add_history(e, "started");
    std::shared_ptr<ReplicationJob> job = e.job;
    Entry* raw = &e;
    if (e.thread.joinable()) e.thread.join();
    job->rearm();
    e.thread = std::thread([this, job, raw] {
      JobOutcome out = job->run();
      std::lock_guard lock(mu);
      raw->outcome = std::move(out);
      raw->thread_done = true;
      cv.notify_all();
    });
    update_doc_entry(e);
  }

  void update_doc_entry(const Entry& e) {
    if (e.spec.db_name.empty()) return;
    auto it = docs.find({e.spec.db_name, e.spec.doc_id});
    if (it == docs.end()) return;
    DocEntry& d = it->second;
    d.job_id = e.id;
    d.state = state_name(e.state);
    d.error_count = std::max(e.failures, d.define_errors);
    d.last_updated = std::time(nullptr);
    if (e.state == JobState::crashing) {
      d.error = e.last_error;
      d.info = Json{{"error", e.last_error}};
    } else {
      d.error.reset();
    }
  }

  // Writes a one-shot document's end state (scheduler thread, mu not held).
  void write_doc_state(const std::string& db, const std::string& doc_id, const std::string& state,
                       const std::optional<std::string>& reason, const std::optional<JobStats>& st,
                       std::time_t start_time) {
    if (!writer_endpoint || db.empty()) return;
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto current = writer_endpoint->get_doc(doc_id);
      auto* doc = std::get_if<Json>(&current);
      if (doc == nullptr) return;  // deleted meanwhile
      (*doc)["_replication_state"] = state;
      (*doc)["_replication_state_time"] = iso_now();
      if (reason) {
        (*doc)["_replication_state_reason"] = *reason;
        doc->erase("_replication_stats");
      } else {
        doc->erase("_replication_state_reason");
      }
      if (st) {
        (*doc)["_replication_stats"] = {
            {"revisions_checked", st->revisions_checked},
            {"missing_revisions_found", st->missing_revisions_found},
            {"docs_read", st->docs_read},
            {"docs_written", st->docs_written},
            {"changes_pending", st->changes_pending ? Json(*st->changes_pending) : Json(nullptr)},
            {"doc_write_failures", st->doc_write_failures},
            {"bulk_get_docs", st->docs_read},
            {"bulk_get_attempts", st->docs_read},
            {"checkpointed_source_seq", st->checkpointed_source_seq},
            {"start_time", iso_time(start_time)}};
      }
      auto put = writer_endpoint->put_doc(doc_id, *doc);
      auto* e = std::get_if<CouchError>(&put);
      if (e == nullptr || e->status != 409) return;
    }
  }

  struct DocWrite {
    std::string db, doc_id, state;
    std::optional<std::string> reason;
    std::optional<JobStats> stats;
    std::time_t start_time = 0;
  };
  struct Callback {
    Done done;
    Outcome<Json> value;
  };

  // Handles jobs whose run() returned (mu held); collects what to do outside the lock.
  void reap(std::vector<DocWrite>& writes, std::vector<Callback>& callbacks,
            std::vector<std::thread>& joins) {
    for (auto it = jobs.begin(); it != jobs.end();) {
      Entry& e = *it->second;
      if (!e.thread_done) {
        ++it;
        continue;
      }
      e.thread_done = false;
      joins.push_back(std::move(e.thread));
      const JobOutcome out = std::move(*e.outcome);
      e.outcome.reset();
      if (e.removing) {
        release_lease(e);
        it = jobs.erase(it);
        continue;
      }
      if (e.rotating) {
        e.rotating = false;
        e.state = JobState::pending;
        add_history(e, "stopped");
        update_doc_entry(e);
        ++it;
        continue;
      }
      if (out.undefined && !e.spec.db_name.empty() && !e.done) {
        to_error_state(e, out.reason);
        it = jobs.erase(it);
        continue;
      }
      if (out.ok) {
        add_history(e, "stopped");
        if (e.done) callbacks.push_back({std::move(*e.done), out.result});
        if (!e.spec.db_name.empty()) {
          auto d = docs.find({e.spec.db_name, e.spec.doc_id});
          if (d != docs.end()) {
            d->second.state = "completed";
            d->second.info = info_of(e);
            d->second.error_count = 0;
            d->second.error.reset();
            d->second.last_updated = std::time(nullptr);
          }
          writes.push_back({e.spec.db_name, e.spec.doc_id, "completed", std::nullopt,
                            e.job->stats(), e.start_time});
        }
        release_lease(e);
        it = jobs.erase(it);
        continue;
      }
      ++e.failures;
      e.last_error = out.reason;
      add_history(e, "crashed", out.reason);
      const bool one_shot_request = e.done.has_value();
      if (one_shot_request || out.permanent) {
        if (e.done) {
          callbacks.push_back({std::move(*e.done), error_for(out)});
        }
        if (!e.spec.db_name.empty()) {
          auto d = docs.find({e.spec.db_name, e.spec.doc_id});
          if (d != docs.end()) {
            d->second.state = "failed";
            d->second.error_count = 1;
            d->second.error = out.reason;
            d->second.info = Json{{"error", out.reason}};
            d->second.last_updated = std::time(nullptr);
          }
          writes.push_back(
              {e.spec.db_name, e.spec.doc_id, "failed", out.reason, std::nullopt, e.start_time});
        }
        release_lease(e);
        it = jobs.erase(it);
        continue;
      }
      e.state = JobState::crashing;
      const int shift = std::min(e.failures - 1, 10);
      const std::int64_t wait = std::min(options.backoff_max_ms, options.backoff_base_ms << shift);
      e.retry_at = Clock::now() + std::chrono::milliseconds(wait);
      update_doc_entry(e);
      ++it;
    }
  }

  // A document whose replication could not be defined (mu held): "error" until the next try,
  // after a random wait of up to 64 s * 2^min(errors, 12) (couch_replicator_doc_processor's
  // error_backoff), or until the document changes.
  void to_error_state(const Entry& e, const std::string& reason) {
    auto d = docs.find({e.spec.db_name, e.spec.doc_id});
    if (d == docs.end()) return;
    DocEntry& de = d->second;
    // The doc processor words it without the error's name.
    constexpr std::string_view kName = "filter_fetch_error: ";
    const std::string said = reason.starts_with(kName) ? reason.substr(kName.size()) : reason;
    de.state = "error";
    de.job_id.clear();
    de.error = said;
    de.info = Json{{"error", said}};
    de.error_count = ++de.define_errors;
    de.last_updated = std::time(nullptr);
    de.spec = e.spec;
    const std::int64_t range_s = std::int64_t{64} << std::min(de.define_errors, 12);
    std::uniform_int_distribution<std::int64_t> wait_s(1, range_s);
    de.retry_at = Clock::now() + std::chrono::seconds(wait_s(random));
    error_docs.insert(d->first);
  }

  // Documents in "error" whose wait is over get their replication defined again (mu held).
  void retry_error_docs() {
    const auto now = Clock::now();
    for (auto k = error_docs.begin(); k != error_docs.end();) {
      const auto d = docs.find(*k);
      if (d == docs.end() || d->second.state != "error" || !d->second.spec) {
        k = error_docs.erase(k);
        continue;
      }
      DocEntry& de = d->second;
      if (de.retry_at > now) {
        ++k;
        continue;
      }
      k = error_docs.erase(k);
      ReplicationSpec spec = std::move(*de.spec);
      de.spec.reset();
      de.state = "initializing";
      if (Entry* e = add_job(std::move(spec), std::nullopt)) update_doc_entry(*e);
      de.error_count = de.define_errors;
    }
  }

  // At each interval, while jobs wait for a slot: stops up to max_churn running continuous jobs,
  // those started longest ago, so that the waiting ones run in turn (mu held;
  // couch_replicator_scheduler:rotate_jobs). The stopped jobs wait again once their thread ends.
  void rotate() {
    std::vector<Entry*> running;
    std::size_t waiting = 0;
    const auto now = Clock::now();
    for (auto& [id, e] : jobs) {
      if (e->removing) continue;
      if (e->state == JobState::running && !e->rotating) {
        if (e->spec.continuous) running.push_back(e.get());
      } else if (e->state == JobState::pending ||
                 (e->state == JobState::crashing && e->retry_at <= now)) {
        ++waiting;
      }
    }
    int busy = 0;
    for (const auto& [id, e] : jobs)
      if (e->state == JobState::running) ++busy;
    const std::int64_t slots = options.max_jobs - busy;
    if (slots < 0) return;
    const std::int64_t stop = std::min({static_cast<std::int64_t>(waiting) - slots,
                                        static_cast<std::int64_t>(running.size()),
                                        static_cast<std::int64_t>(options.max_churn)});
    if (stop <= 0) return;
    std::sort(running.begin(), running.end(),
              [](const Entry* a, const Entry* b) { return a->last_started < b->last_started; });
    for (std::int64_t i = 0; i < stop; ++i) {
      running[i]->rotating = true;
      running[i]->job->stop();
    }
  }

  static Outcome<Json> error_for(const JobOutcome& out) {
    const std::string& r = out.reason;
    if (r.starts_with("db_not_found: "))
      return CouchError{500, "db_not_found", r.substr(std::string("db_not_found: ").size())};
    if (r.starts_with("unauthorized: "))
      return CouchError{401, "unauthorized", r.substr(std::string("unauthorized: ").size())};
    if (r.starts_with("forbidden: "))
      return CouchError{403, "forbidden", r.substr(std::string("forbidden: ").size())};
    return CouchError{500, "error", r};
  }

  // Starts pending and due crashing jobs while fewer than max_jobs run (mu held).
  void schedule() {
    int running = 0;
    for (const auto& [id, e] : jobs)
      if (e->state == JobState::running) ++running;
    std::vector<Entry*> ready;
    const auto now = Clock::now();
    for (auto& [id, e] : jobs) {
      if (e->removing) continue;
      if (e->state == JobState::pending || (e->state == JobState::crashing && e->retry_at <= now))
        ready.push_back(e.get());
    }
    // Those never started, then those started longest ago (couch_replicator_scheduler's
    // start_priority_key, without fair share).
    std::sort(ready.begin(), ready.end(), [](const Entry* a, const Entry* b) {
      return std::tie(a->last_started, a->number) < std::tie(b->last_started, b->number);
    });
    for (Entry* e : ready) {
      if (running >= options.max_jobs) {
        if (e->state == JobState::crashing) {
          e->state = JobState::pending;
          update_doc_entry(*e);
        }
        continue;
      }
      if (e->lease_retry_at > now) continue;
      if (!hold_lease(*e)) {  // another server runs it
        e->lease_retry_at = now + lease_period();
        if (e->state == JobState::crashing) e->state = JobState::pending;
        update_doc_entry(*e);
        continue;
      }
      launch(*e);
      ++running;
    }
  }

  // A _replicator changes row (mu held).
  void handle_doc_event(const Json& row) {
    const std::string id = row.value("id", "");
    if (id.empty() || id.starts_with("_design/")) return;
    const std::string db = std::string(kReplicatorDbName);
    const bool deleted = row.value("deleted", false);
    const Json doc = row.contains("doc") ? row["doc"] : Json(nullptr);
    const auto key = std::make_pair(db, id);
    const auto stop_doc_job = [&] {
      for (auto& [jid, e] : jobs)
        if (e->spec.db_name == db && e->spec.doc_id == id && !e->removing) remove_job(*e);
    };
    if (deleted || !doc.is_object()) {
      stop_doc_job();
      docs.erase(key);
      return;
    }
    const std::string state = doc.value("_replication_state", "");
    if (state == "completed" || state == "failed") {
      stop_doc_job();
      DocEntry d;
      d.db = db;
      d.doc_id = id;
      d.state = state;
      if (state == "failed") d.error = doc.value("_replication_state_reason", "");
      // info_from_doc: the stats without their start_time, which is the row's; a failed
      // document counts one error and started when it failed.
      const std::string state_time = doc.value("_replication_state_time", "");
      d.last_updated = parse_iso_time(state_time).value_or(d.last_updated);
      if (state == "completed" && doc.contains("_replication_stats") &&
          doc["_replication_stats"].is_object()) {
        d.info = doc["_replication_stats"];
        d.start_time = parse_iso_time(d.info.value("start_time", "")).value_or(d.start_time);
        d.info.erase("start_time");
      } else if (d.error) {
        d.info = Json{{"error", *d.error}};
        d.error_count = 1;
        d.start_time = d.last_updated;
      }
      d.source = endpoint_url(doc.value("source", Json(nullptr)));
      d.target = endpoint_url(doc.value("target", Json(nullptr)));
      docs[key] = std::move(d);
      return;
    }
    UserCtx user;
    if (const auto o = doc.find("owner"); o != doc.end() && o->is_string())
      user.name = o->get<std::string>();
    auto parsed = parse_replication(doc, user, options.defaults);
    DocEntry d;
    d.db = db;
    d.doc_id = id;
    d.user = user.name;
    d.source = endpoint_url(doc.value("source", Json(nullptr)));
    d.target = endpoint_url(doc.value("target", Json(nullptr)));
    if (auto* err = std::get_if<CouchError>(&parsed)) {
      stop_doc_job();
      d.state = "failed";
      d.error = err->reason;
      d.info = Json{{"error", err->reason}};
      docs[key] = std::move(d);
      return;
    }
    if (docs.size() >= options.max_documents && docs.count(key) == 0) return;
    ReplicationSpec spec = std::move(std::get<ReplicationSpec>(parsed));
    spec.db_name = db;
    spec.doc_id = id;
    const std::string job_id = ReplicationJob::early_id(spec, options.server_uuid).full;
    // The same replication already runs for this document: nothing changes.
    if (const auto j = jobs.find(job_id);
        j != jobs.end() && !j->second->removing && j->second->spec.doc_id == id) {
      return;
    }
    stop_doc_job();
    d.job_id = job_id;
    d.state = "initializing";
    docs[key] = std::move(d);
    if (const auto j = jobs.find(job_id); j != jobs.end()) {
      // Another document (or a POST /_replicate) runs this replication already.
      DocEntry& de = docs[key];
      de.state = "failed";
      de.error = "Replication `" + job_id + "` specified by document `" + id +
                 "` already started, triggered by document `" + j->second->spec.doc_id +
                 "` from db `" + j->second->spec.db_name + "`";
      de.info = Json{{"error", *de.error}};
      return;
    }
    if (Entry* e = add_job(std::move(spec), std::nullopt)) update_doc_entry(*e);
  }

  static constexpr std::string_view kReplicatorDbName = "_replicator";

  // Stops a job (mu held): it leaves the table once its thread ended.
  void remove_job(Entry& e) {
    e.removing = true;
    if (e.state == JobState::running) {
      e.job->stop();
    } else {
      e.thread_done = true;  // nothing runs: reap() drops it
      e.outcome = JobOutcome{};
    }
    cv.notify_all();
  }

  void scheduler_loop() {
    std::unique_lock lock(mu);
    auto next_rotation = Clock::now() + std::chrono::milliseconds(options.interval_ms);
    while (!stopping) {
      while (!doc_events.empty()) {
        const Json row = std::move(doc_events.front());
        doc_events.pop_front();
        handle_doc_event(row);
      }
      std::vector<DocWrite> writes;
      std::vector<Callback> callbacks;
      std::vector<std::thread> joins;
      reap(writes, callbacks, joins);
      retry_error_docs();
      renew_leases();
      if (Clock::now() >= next_rotation) {
        rotate();
        next_rotation = Clock::now() + std::chrono::milliseconds(options.interval_ms);
      }
      schedule();
      if (!writes.empty() || !callbacks.empty() || !joins.empty()) {
        lock.unlock();
        for (auto& t : joins)
          if (t.joinable()) t.join();
        for (auto& w : writes)
          write_doc_state(w.db, w.doc_id, w.state, w.reason, w.stats, w.start_time);
        for (auto& c : callbacks) c.done(std::move(c.value));
        lock.lock();
        continue;
      }
      // Wake for the next crashing job due, the interval, or an event.
      auto wake = next_rotation;
      for (const auto& [id, e] : jobs) {
        if (e->state == JobState::crashing) wake = std::min(wake, e->retry_at);
        if (!leases() || e->spec.db_name.empty()) continue;
        if (e->state == JobState::running) wake = std::min(wake, e->lease_renew_at);
        if (e->state == JobState::pending && e->lease_retry_at > Clock::now())
          wake = std::min(wake, e->lease_retry_at);
      }
      for (const auto& key : error_docs)
        if (const auto d = docs.find(key); d != docs.end())
          wake = std::min(wake, d->second.retry_at);
      cv.wait_until(lock, wake, [&] {
        if (stopping || !doc_events.empty() || std::exchange(changed, false)) return true;
        for (const auto& [id, e] : jobs)
          if (e->thread_done) return true;
        return false;
      });
    }
  }

  void watcher_loop() {
    Json since = 0;
    std::chrono::milliseconds missing_wait{500};
    while (true) {
      Endpoint* ep;
      {
        std::lock_guard lock(mu);
        if (stopping) return;
        ep = watcher_endpoint.get();
      }
      ChangesQuery q;
      q.since = since;
      q.limit = 100;
      q.longpoll = true;
      q.timeout_ms = 5'000;
      q.include_docs = true;
      auto r = ep->changes(q);
      if (std::holds_alternative<CouchError>(r)) {
        // The database does not exist yet: look again, less and less often (0.5 s to 5 s).
        std::unique_lock lock(mu);
        cv.wait_for(lock, missing_wait, [&] { return stopping; });
        missing_wait = std::min(missing_wait * 2, std::chrono::milliseconds(5'000));
        continue;
      }
      missing_wait = std::chrono::milliseconds(500);
      const Json& answer = std::get<Json>(r);
      const auto results = answer.find("results");
      std::lock_guard lock(mu);
      if (results != answer.end() && results->is_array()) {
        for (const Json& row : *results) doc_events.push_back(row);
      }
      if (const auto ls = answer.find("last_seq"); ls != answer.end()) since = *ls;
      cv.notify_all();
    }
  }
};

Scheduler::Scheduler(EndpointFactory& endpoints, SchedulerOptions options)
    : state_(std::make_unique<State>(endpoints, std::move(options))) {}

Scheduler::~Scheduler() { stop(); }

const ReplicatorDefaults& Scheduler::defaults() const { return state_->options.defaults; }

void Scheduler::start() {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (s.started) return;
  s.started = true;
  if (s.options.watch_replicator_db) {
    s.watcher_endpoint = s.endpoints.replicator_db(State::kReplicatorDbName);
    s.writer_endpoint = s.endpoints.replicator_db(State::kReplicatorDbName);
    s.watcher_thread = std::thread([&s] { s.watcher_loop(); });
  }
  s.scheduler_thread = std::thread([&s] { s.scheduler_loop(); });
}

void Scheduler::stop() {
  State& s = *state_;
  std::vector<std::thread> threads;
  std::vector<State::Callback> callbacks;
  {
    std::lock_guard lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    if (s.watcher_endpoint) s.watcher_endpoint->cancel();
    for (auto& [id, e] : s.jobs) {
      e->job->stop();
      if (e->thread.joinable()) threads.push_back(std::move(e->thread));
    }
    s.cv.notify_all();
  }
  if (s.watcher_thread.joinable()) s.watcher_thread.join();
  if (s.scheduler_thread.joinable()) s.scheduler_thread.join();
  for (auto& t : threads) t.join();
  std::lock_guard lock(s.mu);
  for (auto& [id, e] : s.jobs) {
    if (e->thread.joinable()) e->thread.join();
    // A server that stops gives its jobs' leases, so that another takes them over at once.
    s.release_lease(*e);
    if (e->done) {
      (*e->done)(CouchError{500, "error", "the server is stopping"});
      e->done.reset();
    }
  }
  s.jobs.clear();
}

void Scheduler::replicate(ReplicationSpec spec, Done done) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.stopping) {
    lock.unlock();
    done(CouchError{500, "error", "the server is stopping"});
    return;
  }
  const bool continuous = spec.continuous;
  const std::string id = ReplicationJob::early_id(spec, s.options.server_uuid).full;
  if (continuous) {
    s.add_job(std::move(spec), std::nullopt);
    lock.unlock();
    done(Json{{"ok", true}, {"_local_id", id}});
    return;
  }
  if (s.add_job(std::move(spec), std::move(done)) == nullptr) {
    // The same one-shot replication runs already: this request waits for it too.
    auto& e = *s.jobs.at(id);
    if (e.done) {
      Done first = std::move(*e.done);
      e.done = [first, second = std::move(done)](Outcome<Json> r) {
        first(r);
        second(std::move(r));
      };
    } else {
      e.done = std::move(done);
    }
  }
}

Outcome<Json> Scheduler::cancel(const std::string& id, const std::optional<ReplicationSpec>& spec,
                                const UserCtx& user) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::string key = id;
  if (key.empty() && spec) key = ReplicationJob::early_id(*spec, s.options.server_uuid).full;
  auto it = s.jobs.find(key);
  if (it == s.jobs.end()) {
    // A base id alone (without +continuous...) names the job too.
    for (auto j = s.jobs.begin(); j != s.jobs.end(); ++j)
      if (j->first.substr(0, j->first.find('+')) == key) it = j;
  }
  if (it == s.jobs.end() || it->second->removing) return CouchError{404, "not_found", "missing"};
  if (!it->second->spec.db_name.empty()) return CouchError{404, "not_found", "missing"};
  if (it->second->spec.user.name != user.name && !user.is_server_admin())
    return CouchError{401, "unauthorized", "You are not a server admin."};
  const std::string full = it->first;
  if (it->second->done) {
    (*it->second->done)(CouchError{500, "error", "replication cancelled"});
    it->second->done.reset();
  }
  s.remove_job(*it->second);
  return Json{{"ok", true}, {"_local_id", full}};
}

Json Scheduler::jobs(std::size_t skip, std::optional<std::size_t> limit) const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  Json out = Json::object();
  Json list = Json::array();
  std::size_t total = 0;
  for (const auto& [id, e] : s.jobs) {
    if (e->removing) continue;
    ++total;
    if (total <= skip) continue;
    if (limit && list.size() >= *limit) continue;
    list.push_back(s.job_json(*e));
  }
  out["total_rows"] = total;
  out["offset"] = skip;
  out["jobs"] = std::move(list);
  return out;
}

Outcome<Json> Scheduler::job(const std::string& id) const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  for (const auto& [jid, e] : s.jobs) {
    if (e->removing) continue;
    if (names_job(jid, id)) return s.job_json(*e);
  }
  return CouchError{404, "not_found", "missing"};
}

Json Scheduler::docs(const std::optional<std::string>& db, const std::vector<std::string>& states,
                     std::size_t skip, std::optional<std::size_t> limit) const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  Json list = Json::array();
  std::size_t total = 0;
  for (const auto& [key, d] : s.docs) {
    if (db && d.db != *db) continue;
    if (!states.empty() && std::find(states.begin(), states.end(), d.state) == states.end())
      continue;
    ++total;
    if (total <= skip) continue;
    if (limit && list.size() >= *limit) continue;
    Json info = d.info;
    if (const auto j = s.jobs.find(d.job_id);
        j != s.jobs.end() && !j->second->removing && d.state != "failed" && d.state != "completed")
      info = s.info_of(*j->second);
    list.push_back(Json{{"database", d.db},
                        {"doc_id", d.doc_id},
                        {"id", d.job_id.empty() ? Json(nullptr) : Json(d.job_id)},
                        {"node", s.options.node},
                        {"source", d.source},
                        {"target", d.target},
                        {"state", d.state},
                        {"info", info},
                        {"error_count", d.error_count},
                        {"last_updated", iso_time(d.last_updated)},
                        {"start_time", iso_time(d.start_time)}});
  }
  return Json{{"total_rows", total}, {"offset", skip}, {"docs", std::move(list)}};
}

Outcome<Json> Scheduler::doc(const std::string& db, const std::string& doc_id) const {
  Json all = docs(db, {}, 0, std::nullopt);
  for (const Json& d : all["docs"])
    if (d["doc_id"] == doc_id) return d;
  return CouchError{404, "not_found", "missing"};
}

Json Scheduler::active_tasks() const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  Json out = Json::array();
  for (const auto& [id, e] : s.jobs) {
    if (e->removing || e->state != State::JobState::running) continue;
    const JobStats st = e->job->stats();
    Json t = Json::object();
    t["node"] = s.options.node;
    t["pid"] = "<0." + std::to_string(e->number) + ".0>";
    t["process_status"] = "waiting";
    t["bulk_get_attempts"] = st.docs_read;
    t["bulk_get_docs"] = st.docs_read;
    t["changes_pending"] = st.changes_pending ? Json(*st.changes_pending) : Json(nullptr);
    t["checkpoint_interval"] = e->spec.checkpoint_interval_ms;
    t["checkpointed_source_seq"] = seq_text(st.checkpointed_source_seq);
    t["continuous"] = e->spec.continuous;
    t["database"] = e->spec.db_name.empty() ? Json(nullptr) : Json(e->spec.db_name);
    t["doc_id"] = e->spec.doc_id.empty() ? Json(nullptr) : Json(e->spec.doc_id);
    t["doc_write_failures"] = st.doc_write_failures;
    t["docs_read"] = st.docs_read;
    t["docs_written"] = st.docs_written;
    t["missing_revisions_found"] = st.missing_revisions_found;
    t["replication_id"] = e->job->id().full;
    t["revisions_checked"] = st.revisions_checked;
    t["source"] = e->job->source_display();
    t["source_seq"] = seq_text(st.source_seq);
    t["started_on"] = e->started_on;
    t["target"] = e->job->target_display();
    t["through_seq"] = seq_text(st.through_seq);
    t["type"] = "replication";
    t["updated_on"] = std::time(nullptr);
    t["user"] = e->spec.user.name ? Json(*e->spec.user.name) : Json(nullptr);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace chaise::core::replication
