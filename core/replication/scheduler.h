// core/replication/scheduler.h — the replicator: every replication job of this server, from
// POST /_replicate and from documents of the _replicator database, and what _scheduler,
// _active_tasks and the documents themselves say about them.
//
// Contract
// - A job runs on a thread of its own while it runs; at most `max_jobs` run at once, the others
//   wait as "pending", those never started (or started longest ago) first. While jobs wait, every
//   `interval_ms` up to `max_churn` running continuous jobs, those started longest ago, stop (with
//   a checkpoint) and wait in turn, so that every job runs now and then (CouchDB's rotation).
// - A job that fails is "crashing" and runs again after a backoff that doubles with each
//   consecutive failure (from `backoff_base_ms`, at most `backoff_max_ms`); an error retrying
//   cannot fix (a database missing without create_target, credentials refused) makes it "failed"
//   for good. A _replicator document whose replication cannot be defined because its filter
//   cannot be fetched is in "error": retried after a random wait of up to 64 s * 2^errors
//   (at most 2^12), and at once when the document changes; the document itself is not written.
// - _replicator documents: the watcher reads the database's changes from the start at every
//   start of the server, so continuous jobs and unfinished one-shot jobs resume (from their
//   checkpoints). A one-shot job's document gets `_replication_state` "completed" with
//   `_replication_stats`, or "failed" with `_replication_state_reason`, and
//   `_replication_state_time`; a document already in one of those states starts nothing; a
//   deleted document stops its job; an edited one restarts it when its replication changed.
// - Several servers on one store (FoundationDB; `lease_owner` set): a _replicator document's job
//   runs on one server at a time, the one holding the document's lease, a _local document of
//   _replicator ("replication-lease:<doc id>", {"owner": ...}) written with its revision, so that
//   of two servers taking it at once one gets a conflict. The holder writes it again every
//   lease_ms / 3; the others wait, and take it over once they have seen it unchanged for lease_ms
//   by their own clock (the holder stopped or lost the store), so that no clocks need agree. A
//   holder that finds the lease taken stops its job, and a server that stops gives its leases.
//   Jobs of POST /_replicate stay on the server that was asked.
// - Memory: jobs and documents are held in memory, bounded by `max_documents` (documents past it
//   are refused with an error in _scheduler/docs); each running job holds at most
//   worker_processes + 1 batches of changes.
// - Threading: every method is thread-safe. stop() ends every job (each checkpoints first) and
//   joins every thread; the EndpointFactory must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/replication/endpoint.h"
#include "core/replication/spec.h"

namespace chaise::core::replication {

struct SchedulerOptions {
  std::string server_uuid;
  std::string node = "nonode@nohost";
  // [replicator] max_jobs: jobs running at once. 500.
  int max_jobs = 500;
  // [replicator] interval: how often pending and crashing jobs are looked at, in ms. 60,000;
  // a job that ends or a document that changes is handled at once.
  std::int64_t interval_ms = 60'000;
  // [replicator] max_churn: at each interval, while jobs wait, at most this many running
  // continuous jobs (those started longest ago) are stopped to let waiting ones run. 20.
  int max_churn = 20;
  // [replicator] max_history: events kept per job. 20.
  int max_history = 20;
  // The backoff of a crashing job: base * 2^min(failures - 1, 10), at most max: CouchDB's 30 s
  // doubling up to 30,720 s.
  std::int64_t backoff_base_ms = 30'000;
  std::int64_t backoff_max_ms = 30'720'000;
  // _replicator documents held at most. 100,000.
  std::size_t max_documents = 100'000;
  // Watch the _replicator database (off in tests of the scheduler alone).
  bool watch_replicator_db = true;
  // This server's name in _replicator documents' leases (see the contract); empty: this server is
  // the only one on its store, and takes no leases.
  std::string lease_owner;
  // [replicator] lease_timeout: how long a lease stays held without being written again, in ms.
  // 30,000.
  std::int64_t lease_ms = 30'000;
  // Writes the _replicator database's _local document `id` (`doc`, without _id and _rev) only if
  // its revision is still `rev` (nullopt: none); false when another server wrote it meanwhile
  // (core::put_local_if). Leases are written through it, so that two servers never both take one.
  // Unset: written with put_local, which compares nothing.
  std::function<Outcome<bool>(std::string_view id, const std::optional<std::string>& rev,
                              const Json& doc)>
      put_local_if;
  ReplicatorDefaults defaults;
};

class Scheduler {
 public:
  Scheduler(EndpointFactory& endpoints, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Starts the scheduling thread and the _replicator watcher.
  void start();
  void stop();

  // The [replicator] defaults a replication starts from.
  const ReplicatorDefaults& defaults() const;

  // POST /_replicate. A one-shot replication calls `done` when it ends (its answer, or the
  // error: 404 db_not_found, 401 unauthorized, 500 with the reason); a continuous one calls it
  // at once with {"ok": true, "_local_id": id}. `done` runs on a scheduler thread.
  using Done = std::function<void(Outcome<Json>)>;
  void replicate(ReplicationSpec spec, Done done);
  // POST /_replicate with "cancel" by `user`: the job named by `id` (a full replication id) or,
  // when id is empty, by `spec`'s id. {"ok": true, "_local_id": id}; 404 when no such job runs;
  // 401 when it is another user's and `user` is not a server admin.
  Outcome<Json> cancel(const std::string& id, const std::optional<ReplicationSpec>& spec,
                       const UserCtx& user);

  // GET /_scheduler/jobs (`skip`, `limit`), /_scheduler/jobs/{id}.
  Json jobs(std::size_t skip, std::optional<std::size_t> limit) const;
  Outcome<Json> job(const std::string& id) const;
  // Whether job `full_id` ("base+continuous...") is the one GET /_scheduler/jobs/{id} names: by its
  // full id or by its base.
  static bool names_job(std::string_view full_id, std::string_view id) {
    return full_id == id || full_id.substr(0, full_id.find('+')) == id;
  }
  // GET /_scheduler/docs[/{db}] (states: only those; empty: all), /_scheduler/docs/{db}/{docid}.
  Json docs(const std::optional<std::string>& db, const std::vector<std::string>& states,
            std::size_t skip, std::optional<std::size_t> limit) const;
  Outcome<Json> doc(const std::string& db, const std::string& doc_id) const;
  // The running replications as GET /_active_tasks lists them.
  Json active_tasks() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chaise::core::replication
